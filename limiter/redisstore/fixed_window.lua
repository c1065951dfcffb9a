-- fixed_window.lua: FixedWindow, the mirror of limiter.TakeFixedWindow and
-- limiter.RefundFixedWindow. Windows are aligned on multiples of the period
-- since the Unix epoch. It defines one function, called by batch.lua.
--
-- key      the window, a HASH: w = window index floor(t / P), c = cost
--          admitted in window w.
-- now      µs since the Unix epoch, already clamped (see clock).
-- op       'take' or 'refund'.
-- n        the cost (take) or amount (refund), 0 <= n <= 2^53.
-- rate     cost admitted per window.
-- P        the period in µs.
-- margin   expiry margin in ms.
--
-- Writes {status, allowed, remaining, retry_us, reset_us, 0} at
-- out[at + 1 ..]; status 1 means the cost exceeds the rate and can never be
-- admitted.

local function fixed_window(out, at, key, now, op, n, rate, P, margin)
  local st = redis.pcall('HMGET', key, 'w', 'c')
  if failed(out, at, st) then return end
  local stored = clamp(num(st[1]), 0, idiv(MAX_NOW, P))
  local count = clamp(num(st[2]), 0, rate)
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
  if op == 'refund' then
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
  persist(key, reset, margin, 'w', w, 'c', count)
  reply(out, at, status, allowed, rate - count, retry, reset, 0)
end
