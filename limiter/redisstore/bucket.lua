-- bucket.lua: TokenBucket, LeakyBucketPolicing and LeakyBucketShaping, the
-- mirror of limiter.TakeBucket and limiter.RefundBucket. It defines one
-- function, called by batch.lua for each of its keys.
--
-- key      the bucket, a HASH: l = level in units of 1/p token (0 = full
--          token bucket, empty leaky bucket), t = time of l in µs.
-- now      µs since the Unix epoch, already clamped (see clock).
-- op       'take' or 'refund'.
-- n        the cost (take) or amount (refund), 0 <= n <= 2^53.
-- burst    capacity in whole tokens.
-- p        units per token, Period_µs / gcd(Rate, Period_µs).
-- r        units drained per µs, Rate / gcd(Rate, Period_µs).
-- shaping  true to report the departure delay (LeakyBucketShaping).
-- margin   expiry margin in ms.
--
-- Writes {status, allowed, remaining, retry_us, reset_us, delay_us} at
-- out[at + 1 ..]; status 1 means the cost exceeds the burst and can never
-- be admitted.

local function bucket(out, at, key, now, op, n, burst, p, r, shaping, margin)
  local st = redis.pcall('HMGET', key, 'l', 't')
  if failed(out, at, st) then return end
  local capacity = burst * p
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

  local status, allowed, retry, delay = 0, 1, 0, 0
  if op == 'refund' then
    if n >= burst then
      level = 0
    else
      level = math.max(0, level - n * p)
    end
  elseif n > burst then
    status, allowed = 1, 0
  else
    local need = n * p
    -- need > capacity - level, written so no sum can pass 2^53.
    if need > capacity - level then
      allowed, retry = 0, cdiv(need - (capacity - level), r)
    else
      if shaping and n > 0 then
        delay = cdiv(level, r)
      end
      level = level + need
    end
  end

  local reset = cdiv(level, r)
  persist(key, reset, margin, 'l', level, 't', last)
  reply(out, at, status, allowed, idiv(capacity - level, p), retry, reset, delay)
end
