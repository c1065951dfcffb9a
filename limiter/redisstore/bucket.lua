-- bucket.lua: TokenBucket, LeakyBucketPolicing and LeakyBucketShaping, the
-- mirror of limiter.TakeBucket and limiter.RefundBucket. It defines decide,
-- called by batch.lua for each of its keys.
--
-- key      the bucket, a HASH: l = level in units of 1/p token (0 = full
--          token bucket, empty leaky bucket), t = time of l in µs.
-- now      µs since the Unix epoch, already clamped (see batch.lua).
-- alg      the limiter.Algorithm value: SHAPING (LeakyBucketShaping)
--          reports the departure delay.
-- op       TAKE, REFUND or DRY (a TAKE that writes nothing).
-- n        the cost (take) or amount (refund), 0 <= n <= 2^53.
-- burst    capacity in whole tokens.
-- p        units per token, Period_µs / gcd(Rate, Period_µs).
-- r        units drained per µs, Rate / gcd(Rate, Period_µs).
-- margin   expiry margin in ms.
--
-- Writes {status, allowed, remaining, retry_us, reset_us, delay_us} at
-- out[at + 1 ..]; status 1 means the cost exceeds the burst and can never
-- be admitted, status 2 that the key could not be read (see batch.lua).

-- SHAPING is limiter.LeakyBucketShaping, the one bucket algorithm whose
-- admissions report a delay.
local SHAPING = 2

local function decide(out, at, key, now, alg, op, n, burst, p, r, margin)
  local st = redis.pcall('HMGET', key, 'l', 't')
  if st.err then
    out[at + 1], out[at + 2], out[at + 3], out[at + 4], out[at + 5], out[at + 6] = 2, st.err, 0, 0, 0, 0
    return
  end
  local capacity = burst * p
  local level = tonumber(st[1]) or 0
  if level < 0 then level = 0 elseif level > capacity then level = capacity end
  local last = tonumber(st[2]) or 0
  if last < 0 then last = 0 elseif last > MAX_NOW then last = MAX_NOW end
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
  if op == REFUND then
    if n >= burst then
      level = 0
    elseif n * p < level then
      level = level - n * p
    else
      level = 0
    end
  elseif n > burst then
    status, allowed = 1, 0
  else
    local need = n * p
    -- need > capacity - level, written so no sum can pass 2^53.
    if need > capacity - level then
      allowed, retry = 0, cdiv(need - (capacity - level), r)
    else
      if alg == SHAPING and n > 0 then
        delay = cdiv(level, r)
      end
      level = level + need
    end
  end

  local reset = cdiv(level, r)
  if op ~= DRY then
    persist(key, reset, margin, 'l', level, 't', last)
  end
  out[at + 1], out[at + 2], out[at + 3] = status, allowed, idiv(capacity - level, p)
  out[at + 4], out[at + 5], out[at + 6] = retry, reset, delay
end
