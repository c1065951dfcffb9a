-- sliding_counter.lua: SlidingCounter, the mirror of
-- limiter.TakeSlidingCounter and limiter.RefundSlidingCounter: two adjacent
-- fixed windows, the previous one weighted by how much of it still overlaps
-- the trailing period, compared in exact integer products (never rounded).
-- It defines decide, called by batch.lua for each of its keys.
--
-- key      the counter, a HASH: w = window index floor(t / P), c = cost in
--          window w, p = cost in window w - 1.
-- now      µs since the Unix epoch, already clamped (see batch.lua).
-- alg      the limiter.Algorithm value (unused).
-- op       TAKE, REFUND or DRY (a TAKE that writes nothing).
-- n        the cost (take) or amount (refund), 0 <= n <= 2^53.
-- rate     cost admitted per trailing period; rate × P < 2^53.
-- P        the period in µs.
-- c        unused.
-- margin   expiry margin in ms.
--
-- Returns status, allowed, remaining, retry_us, reset_us, 0; status 1
-- means the cost exceeds the rate and can never be admitted, status 2 that
-- the key could not be read, with Redis's message as allowed (see batch.lua).

-- counter_retry is the first instant cost n fits if nothing else is
-- admitted, e µs into window w with P - e = rest left: later in this
-- window, or else in the next one, where prev' = cur and cur' = 0.
local function counter_retry(n, rate, P, cur, prev, e, rest)
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

local function decide(key, now, alg, op, n, rate, P, c, margin)
  local st = redis.pcall('HMGET', key, 'w', 'c', 'p')
  if st.err then
    return 2, st.err, 0, 0, 0, 0
  end
  local stored = math.min(math.max(tonumber(st[1]) or 0, 0), idiv(MAX_NOW, P))
  local cur = math.min(math.max(tonumber(st[2]) or 0, 0), rate)
  local prev = math.min(math.max(tonumber(st[3]) or 0, 0), rate)
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

  local status, allowed, retry = 0, 1, 0
  if op == REFUND then
    local fromCur = math.min(n, cur)
    cur = cur - fromCur
    prev = math.max(0, prev - (n - fromCur))
  elseif n > rate then
    status, allowed = 1, 0
  else
    local a = rate - cur - n
    if a < 0 or prev * rest > a * P then
      allowed, retry = 0, counter_retry(n, rate, P, cur, prev, e, rest)
    else
      cur = cur + n
    end
  end

  local reset = 0
  if cur > 0 then
    reset = rest + P
  elseif prev > 0 then
    reset = rest
  end
  if op ~= DRY then
    persist(key, reset, margin, 'w', w, 'c', cur, 'p', prev)
  end
  return status, allowed, math.max(0, rate - cur - cdiv(prev * rest, P)),
    retry, reset, 0
end
