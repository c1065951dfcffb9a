-- fixed_window.lua: FixedWindow, the mirror of limiter.TakeFixedWindow and
-- limiter.RefundFixedWindow. Windows are aligned on multiples of the period
-- since the Unix epoch. It defines decide, called by batch.lua for each of its keys.
--
-- key      the window, a HASH: w = window index floor(t / P), c = cost
--          admitted in window w.
-- now      µs since the Unix epoch, already clamped (see batch.lua).
-- alg      the limiter.Algorithm value (unused).
-- op       TAKE, REFUND or DRY (a TAKE that writes nothing).
-- n        the cost (take) or amount (refund), 0 <= n <= 2^53.
-- rate     cost admitted per window.
-- P        the period in µs.
-- c        unused.
-- margin   expiry margin in ms.
--
-- Returns status, allowed, remaining, retry_us, reset_us, 0; status 1
-- means the cost exceeds the rate and can never be admitted, status 2 that
-- the key could not be read, with Redis's message as allowed (see batch.lua).

local function decide(key, now, alg, op, n, rate, P, c, margin)
  local st = redis.pcall('HMGET', key, 'w', 'c')
  if st.err then
    return 2, st.err, 0, 0, 0, 0
  end
  local stored = math.min(math.max(tonumber(st[1]) or 0, 0), idiv(MAX_NOW, P))
  local count = math.min(math.max(tonumber(st[2]) or 0, 0), rate)
  local w = idiv(now, P)
  local e = now - w * P
  if w < stored then
    -- The clock went back: stand at the stored window's start.
    w, e = stored, 0
  end
  if w ~= stored then
    count = 0
  end

  local status, allowed, retry = 0, 1, 0
  if op == REFUND then
    count = math.max(0, count - n)
  elseif n > rate then
    status, allowed = 1, 0
  elseif n > rate - count then
    allowed, retry = 0, P - e
  else
    count = count + n
  end

  local reset = 0
  if count > 0 then reset = P - e end
  if op ~= DRY then
    persist(key, reset, margin, 'w', w, 'c', count)
  end
  return status, allowed, rate - count,
    retry, reset, 0
end
