-- fixed_window.lua: FixedWindow, the mirror of limiter.TakeFixedWindow and
-- limiter.RefundFixedWindow. Windows are aligned on multiples of the period
-- since the Unix epoch.
--
-- KEYS[1]  the window, a HASH: w = window index floor(t / P), c = cost
--          admitted in window w.
-- ARGV[1]  now in µs since the Unix epoch, or '' to read Redis TIME.
-- ARGV[2]  'take' or 'refund'.
-- ARGV[3]  n: the cost (take) or amount (refund), 0 <= n <= 2^53.
-- ARGV[4]  rate: cost admitted per window.
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

local st = redis.call('HMGET', key, 'w', 'c')
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

local function finish(status, allowed, retry)
  local reset = 0
  if count > 0 then reset = P - e end
  persist(key, {'w', int(w), 'c', int(count)}, reset, margin)
  return {status, allowed, rate - count, retry, reset, 0}
end

if op == 'refund' then
  count = math.max(0, count - n)
  return finish(0, 1, 0)
end

if n > rate then
  return finish(1, 0, 0)
end
if n > rate - count then
  return finish(0, 0, P - e)
end
count = count + n
return finish(0, 1, 0)
