-- bucket.lua: TokenBucket, LeakyBucketPolicing and LeakyBucketShaping, the
-- mirror of limiter.TakeBucket and limiter.RefundBucket. One decision per
-- call, atomic because Redis runs one script at a time.
--
-- KEYS[1]  the bucket, a HASH: l = level in units of 1/p token (0 = full
--          token bucket, empty leaky bucket), t = time of l in µs.
-- ARGV[1]  now in µs since the Unix epoch, or '' to read Redis TIME.
--          Production always passes ''.
-- ARGV[2]  'take' or 'refund'.
-- ARGV[3]  n: the cost (take) or amount (refund), 0 <= n <= 2^53.
-- ARGV[4]  burst: capacity in whole tokens.
-- ARGV[5]  p: units per token, Period_µs / gcd(Rate, Period_µs).
-- ARGV[6]  r: units drained per µs, Rate / gcd(Rate, Period_µs).
-- ARGV[7]  '1' to report the departure delay (LeakyBucketShaping), else '0'.
-- ARGV[8]  expiry margin in ms.
--
-- Returns {status, allowed, remaining, retry_us, reset_us, delay_us};
-- status 1 means the cost exceeds the burst and can never be admitted.

local key = KEYS[1]
local now = clock(ARGV[1])
local op = ARGV[2]
local n = tonumber(ARGV[3])
local burst = tonumber(ARGV[4])
local p = tonumber(ARGV[5])
local r = tonumber(ARGV[6])
local capacity = burst * p
local margin = tonumber(ARGV[8])

local st = redis.call('HMGET', key, 'l', 't')
local level = clamp(num(st[1]), 0, capacity)
local last = clamp(num(st[2]), 0, MAX_NOW)
if now > last then
  -- elapsed × r is formed only when it is below level, so below 2^53.
  local elapsed = now - last
  if elapsed >= cdiv(level, r) then
    level = 0
  else
    level = level - elapsed * r
  end
  last = now
end

local function finish(status, allowed, retry, delay)
  local reset = cdiv(level, r)
  persist(key, {'l', int(level), 't', int(last)}, reset, margin)
  return {status, allowed, idiv(capacity - level, p), retry, reset, delay}
end

if op == 'refund' then
  if n >= burst then
    level = 0
  else
    level = math.max(0, level - n * p)
  end
  return finish(0, 1, 0, 0)
end

if n > burst then
  return finish(1, 0, 0, 0)
end
local need = n * p
-- need > capacity - level, written so no sum can pass 2^53.
if need > capacity - level then
  return finish(0, 0, cdiv(need - (capacity - level), r), 0)
end
local before = level
level = level + need
local delay = 0
if ARGV[7] == '1' and n > 0 then
  delay = cdiv(before, r)
end
return finish(0, 1, 0, delay)
