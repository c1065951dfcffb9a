-- sliding_counter.lua: SlidingCounter, the mirror of
-- limiter.TakeSlidingCounter and limiter.RefundSlidingCounter: two adjacent
-- fixed windows, the previous one weighted by how much of it still overlaps
-- the trailing period, compared in exact integer products (never rounded).
--
-- KEYS[1]  the counter, a HASH: w = window index floor(t / P), c = cost in
--          window w, p = cost in window w - 1.
-- ARGV[1]  now in µs since the Unix epoch, or '' to read Redis TIME.
-- ARGV[2]  'take' or 'refund'.
-- ARGV[3]  n: the cost (take) or amount (refund), 0 <= n <= 2^53.
-- ARGV[4]  rate: cost admitted per trailing period; rate × P < 2^53.
-- ARGV[5]  P: the period in µs.
-- ARGV[6]  expiry margin in ms.
--
-- Returns {status, allowed, remaining, retry_us, reset_us, 0}; status 1
-- means the cost exceeds the rate and can never be admitted.

local key = KEYS[1]
local now = clock(ARGV[1])
local op = ARGV[2]
local n = tonumber(ARGV[3])
local rate = tonumber(ARGV[4])
local P = tonumber(ARGV[5])
local margin = tonumber(ARGV[6])

local st = redis.call('HMGET', key, 'w', 'c', 'p')
local stored = clamp(num(st[1]), 0, idiv(MAX_NOW, P))
local cur = clamp(num(st[2]), 0, rate)
local prev = clamp(num(st[3]), 0, rate)
local w = idiv(now, P)
local e = now - w * P
if w < stored then
  -- The clock went back: stand at the stored window's start.
  w, e = stored, 0
end
if w == stored + 1 then
  cur, prev = 0, cur
elseif w > stored + 1 then
  cur, prev = 0, 0
end
local rest = P - e

local function resetAfter()
  if cur > 0 then return rest + P end
  if prev > 0 then return rest end
  return 0
end

local function finish(status, allowed, retry)
  local reset = resetAfter()
  persist(key, {'w', int(w), 'c', int(cur), 'p', int(prev)}, reset, margin)
  local remaining = math.max(0, rate - cur - cdiv(prev * rest, P))
  return {status, allowed, remaining, retry, reset, 0}
end

-- retryAfter is the first instant the cost fits if nothing else is
-- admitted: later in this window, or else in the next one, where
-- prev' = cur and cur' = 0.
local function retryAfter()
  local a = rate - cur - n
  if a >= 0 and prev > 0 then
    local t = P - idiv(a * P, prev)
    if t < P then return t - e end
  end
  local t2 = 0
  if cur > 0 then
    t2 = math.max(0, P - idiv((rate - n) * P, cur))
  end
  return rest + t2
end

if op == 'refund' then
  local fromCur = math.min(n, cur)
  cur = cur - fromCur
  prev = math.max(0, prev - (n - fromCur))
  return finish(0, 1, 0)
end

if n > rate then
  return finish(1, 0, 0)
end
local a = rate - cur - n
if a < 0 or prev * rest > a * P then
  return finish(0, 0, retryAfter())
end
cur = cur + n
return finish(0, 1, 0)
