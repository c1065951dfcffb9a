-- batch.lua closes every costguard script: common.lua, persist.lua for the
-- window families, one algorithm file (which defines decide) and this file,
-- concatenated (see script.go). One call decides for every key it is given,
-- in order, each exactly as if it were alone: Redis runs the whole script
-- atomically, and the decisions run one after another inside it, so a key
-- named twice sees its first decision's write.
--
-- KEYS[i]  the i-th decision's key (on a Cluster, all in one hash slot).
-- ARGV[1]  now in µs since the Unix epoch, or '' to read Redis TIME once for
--          every decision of this call. Production always passes ''.
-- ARGV[2]  expiry margin in ms.
-- ARGV[3]  the keys' records, one per key in KEYS order, each RECORD
--          little-endian signed 64-bit integers (struct '<i8' each): op
--          (TAKE 0, REFUND 1), algorithm (the limiter.Algorithm value, one
--          of the script's family), n (0 <= n <= 2^53), then a, b, c: for
--          the bucket algorithms burst, p and r (limiter.Limit.Bucket's
--          Burst, Unit and Refill; see bucket.lua); for the window
--          algorithms rate, P and 0.
--          Binary because Lua's tonumber parses text with strtod, which
--          costs more than a decision's arithmetic; every value is at most
--          2^53, so the doubles struct.unpack returns are exact.
--
-- Returns one string: a record per key in KEYS order, each RECORD (the
-- layout of ARGV[3]'s), of {status, allowed, remaining, retry_us, reset_us,
-- delay_us}, status 0 for a decision, 1 for a cost that can never fit; then
-- the error messages, if any, one after another. Status 2 is an error for
-- that key alone, a key holding another type: each algorithm reads its key
-- with redis.pcall before it writes anything, so such a key fails alone
-- and is left as it was; its record's second value is then the byte length
-- of Redis's message, which follows the records in KEYS order. An error
-- past a key's first read (a write refused, OOM say) aborts the whole call,
-- as it would a single-key script.
-- One string because Redis converts a reply to RESP per element, and the
-- client decodes each integer of an array on its own.

local RECORD = '<i8i8i8i8i8i8'
local RECORD_SIZE = 48
local unpack, pack = struct.unpack, struct.pack

local now = now_us(ARGV[1]) -- read once: every decision of the call shares it
local margin = ARGV[2] + 0 -- one strtod, where tonumber runs two (see now_us)
local records = ARGV[3]
local nkeys = #KEYS
if #records ~= nkeys * RECORD_SIZE then
  return redis.error_reply('costguard: ' .. #records .. ' bytes of records for ' .. nkeys .. ' keys')
end

if nkeys == 1 then -- the common call: no table to build and join
  local op, alg, n, a, b, c = unpack(RECORD, records)
  local status, allowed, remaining, retry, reset, delay = decide(KEYS[1], now, alg, op, n, a, b, c, margin)
  if status == 2 then
    return pack(RECORD, 2, #allowed, 0, 0, 0, 0) .. allowed
  end
  return pack(RECORD, status, allowed, remaining, retry, reset, delay)
end

local out, errs = {}, nil
for i = 1, nkeys do
  local op, alg, n, a, b, c = unpack(RECORD, records, (i - 1) * RECORD_SIZE + 1)
  local status, allowed, remaining, retry, reset, delay = decide(KEYS[i], now, alg, op, n, a, b, c, margin)
  if status == 2 then -- rare: the message joins the tail
    errs = (errs or '') .. allowed
    allowed = #allowed
  end
  out[i] = pack(RECORD, status, allowed, remaining, retry, reset, delay)
end
if errs then
  out[nkeys + 1] = errs
end
return table.concat(out)
