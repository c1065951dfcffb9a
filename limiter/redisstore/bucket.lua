-- bucket.lua: TokenBucket, LeakyBucketPolicing and LeakyBucketShaping, the
-- mirror of limiter.TakeBucket and limiter.RefundBucket. It defines decide,
-- called by batch.lua for each of its keys.
--
-- key      the bucket, a string of two little-endian signed integers
--          (struct.pack): the level in units of 1/p token (0 = full token
--          bucket, empty leaky bucket), then the time of the level in µs.
--          12 bytes ('<i5i7') when the level is below 2^39, else 16
--          ('<i8i8'). A key written by an earlier version, a HASH of
--          l (level) and t (time), is read as well and rewritten as a
--          string, so an upgrade keeps every budget.
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
-- Returns status, allowed, remaining, retry_us, reset_us, delay_us; status 1
-- means the cost exceeds the burst and can never be admitted, status 2 that
-- the key could not be read, with Redis's message as allowed (see batch.lua).

local function decide(key, now, alg, op, n, burst, p, r, margin)
  -- The constants are decide's own locals: a local of the file that decide
  -- used would be an upvalue, which Lua allocates and collects on every
  -- call as it does the closure.

  -- SHAPING is limiter.LeakyBucketShaping, the one bucket algorithm whose
  -- admissions report a delay.
  local SHAPING = 2

  -- The key's value: level, then time, every value below 2^53 (so the
  -- doubles struct.unpack returns are exact). A time fits 7 bytes until
  -- limiter.MaxNow; a level below SHORT_LEVEL fits 5, and Redis then keeps
  -- the value in a 32-byte allocation instead of a 48-byte one.
  local SHORT, SHORT_SIZE, SHORT_LEVEL = '<i5i7', 12, 549755813888 -- 2^39
  local LONG, LONG_SIZE = '<i8i8', 16

  local level, last = 0, 0
  local v = redis.pcall('GET', key)
  if v then
    local bad
    if type(v) == 'string' then
      if #v == SHORT_SIZE then
        level, last = struct.unpack(SHORT, v)
      elseif #v == LONG_SIZE then
        level, last = struct.unpack(LONG, v)
      else
        bad = 'WRONGTYPE costguard: a bucket key holds 12 or 16 bytes; this one holds ' .. #v
      end
    else -- not a string: the HASH of an earlier version, or another type
      local st = redis.pcall('HMGET', key, 'l', 't')
      if st.err then
        bad = st.err
      else
        level, last = tonumber(st[1]) or 0, tonumber(st[2]) or 0
      end
    end
    if bad then
      return 2, bad, 0, 0, 0, 0
    end
  end
  local capacity = burst * p
  if level < 0 then level = 0 elseif level > capacity then level = capacity end
  if last < 0 then last = 0 elseif last > MAX_NOW then last = MAX_NOW end
  if now > last then
    -- elapsed × r is formed only when it is below level, so below 2^53.
    -- r is 1 whenever Rate divides Period in µs (1000/s, 100/min): then
    -- each ⌈x / r⌉ below is x, without a call.
    local elapsed = now - last
    if elapsed >= (r == 1 and level or cdiv(level, r)) then
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

  local reset = r == 1 and level or cdiv(level, r)
  if op ~= DRY then
    -- As persist (persist.lua) does, with the state as one string: SET
    -- replaces a HASH of an earlier version, and sets the expiry too.
    if reset <= 0 then
      redis.call('DEL', key)
    else
      local state
      if level < SHORT_LEVEL then
        state = struct.pack(SHORT, level, last)
      else
        state = struct.pack(LONG, level, last)
      end
      -- string.format, not common.lua's fmt: fmt would be an upvalue.
      redis.call('SET', key, state, 'PX', string.format('%d', cdiv(reset, 1000) + margin))
    end
  end
  return status, allowed, idiv(capacity - level, p),
    retry, reset, delay
end
