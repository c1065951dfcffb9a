-- batch.lua is the entry point of the one script the store runs: common.lua,
-- the four algorithm files and this file, concatenated. One call decides
-- for every key it is given, in order, each exactly as if it were alone:
-- Redis runs the whole script atomically, and the decisions run one after
-- another inside it, so a key named twice sees its first decision's write.
--
-- KEYS[i]  the i-th decision's key (on a Cluster, all in one hash slot).
-- ARGV[1]  now in µs since the Unix epoch, or '' to read Redis TIME once for
--          every decision of this call. Production always passes ''.
-- ARGV[2]  expiry margin in ms.
-- ARGV[3 + 6(i-1)] ... ARGV[8 + 6(i-1)], for KEYS[i]:
--          algorithm (the limiter.Algorithm value, 0 to 5), 'take' or
--          'refund', n (0 <= n <= 2^53), then a, b, c: for the bucket
--          algorithms (0 to 2) burst, p and r (see bucket.lua); for the
--          window algorithms (3 to 5) rate, P and 0.
--
-- Returns a flat array of 6 integers per key, in KEYS order:
-- {status, allowed, remaining, retry_us, reset_us, delay_us}, status 0 for
-- a decision, 1 for a cost that can never fit. Status 2 is an error for
-- that key alone, a key holding another type (see failed): the second
-- value is Redis's message. An error past a key's first read (a write
-- refused, OOM say) aborts the whole call, as it would a single-key script.

local STRIDE = 6

local now = clock(ARGV[1])
local margin = tonumber(ARGV[2])

local out = {}
for i = 1, #KEYS do
  local base = 2 + (i - 1) * STRIDE
  local alg, op, n = tonumber(ARGV[base + 1]), ARGV[base + 2], tonumber(ARGV[base + 3])
  local a, b = tonumber(ARGV[base + 4]), tonumber(ARGV[base + 5])
  local at = (i - 1) * STRIDE
  if alg <= 2 then
    bucket(out, at, KEYS[i], now, op, n, a, b, tonumber(ARGV[base + 6]), alg == 2, margin)
  elseif alg == 3 then
    fixed_window(out, at, KEYS[i], now, op, n, a, b, margin)
  elseif alg == 4 then
    sliding_log(out, at, KEYS[i], now, op, n, a, b, margin)
  else
    sliding_counter(out, at, KEYS[i], now, op, n, a, b, margin)
  end
end
return out
