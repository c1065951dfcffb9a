-- multi.lua closes the TakeAll script: common.lua, persist.lua, then every
-- algorithm file wrapped in its own block that files its decide under its
-- family (script.go writes those few lines of glue:
-- `do <file> DECIDE[family] = decide end`), then this file. One call takes
-- every key's cost when each fits, or none: Redis runs the whole script
-- atomically, so no other command sees the keys between the two passes.
--
-- KEYS[i]  the i-th budget's key, each named once (on a Cluster, all in one
--          hash slot: the budgets of one owner share its hash tag).
-- ARGV[1]  now in µs since the Unix epoch, or '' to read Redis TIME once.
--          Production always passes ''.
-- ARGV[2]  expiry margin in ms.
-- ARGV[3]  the keys' records, as in batch.lua: op (ignored: every record
--          is a take), algorithm, n, a, b, c.
--
-- Returns what batch.lua returns: one string, a record per key in KEYS
-- order of {status, allowed, remaining, retry_us, reset_us, delay_us}, then
-- the messages of the keys of status 2.
--
-- The first pass decides every key DRY: what a take of it alone would
-- answer, writing nothing a take would change. Only when every key is
-- admitted (status 0, allowed 1) does the second pass take them all, and
-- each is then admitted with the same answer: its key is as the first pass
-- found it and now is the same. So a refusal, a cost above capacity or a
-- key of the wrong type (status 2, found in the first pass before anything
-- is written) debits nothing; the refusing keys answer as the first pass
-- found them, and the others as a peek does.
--
-- Top level: common.lua's, persist.lua's and the families' function definitions, four
-- small tables and this loop; the decisions cost what batch.lua's do,
-- twice over for an admission.

local RECORD = '<i8i8i8i8i8i8'
local RECORD_SIZE = 48
local unpack, pack = struct.unpack, struct.pack

local now = now_us(ARGV[1])
local margin = ARGV[2] + 0 -- one strtod, where tonumber runs two (see now_us)
local records = ARGV[3]
if #records ~= #KEYS * RECORD_SIZE then
  return redis.error_reply('costguard: ' .. #records .. ' bytes of records for ' .. #KEYS .. ' keys')
end

-- limiter.Algorithm value + 1 to its family's decide.
local BY_ALG = {DECIDE.bucket, DECIDE.bucket, DECIDE.bucket, DECIDE.fixed_window, DECIDE.sliding_log, DECIDE.sliding_counter}

-- res[i] is the i-th key's answer, the six values its decide returns.
local res = {}
local all = true
for i = 1, #KEYS do
  local _, alg, n, a, b, c = unpack(RECORD, records, (i - 1) * RECORD_SIZE + 1)
  local r = {BY_ALG[alg + 1](KEYS[i], now, alg, DRY, n, a, b, c, margin)}
  res[i] = r
  if r[1] ~= 0 or r[2] ~= 1 then
    all = false
  end
end
if all then
  for i = 1, #KEYS do
    local _, alg, n, a, b, c = unpack(RECORD, records, (i - 1) * RECORD_SIZE + 1)
    res[i] = {BY_ALG[alg + 1](KEYS[i], now, alg, TAKE, n, a, b, c, margin)}
  end
else
  -- Nothing is taken: a key that would have fitted reports its budget as it
  -- stands (a dry take of 0, a peek), not as the take would have left it.
  for i = 1, #KEYS do
    local _, alg, n, a, b, c = unpack(RECORD, records, (i - 1) * RECORD_SIZE + 1)
    local r = res[i]
    if n > 0 and r[1] == 0 and r[2] == 1 then
      res[i] = {BY_ALG[alg + 1](KEYS[i], now, alg, DRY, 0, a, b, c, margin)}
    end
  end
end

-- The reply, packed as batch.lua packs its own.
local out, errs = {}, nil
for i = 1, #KEYS do
  local r = res[i]
  local allowed = r[2]
  if r[1] == 2 then
    errs = (errs or '') .. allowed
    allowed = #allowed
  end
  out[i] = pack(RECORD, r[1], allowed, r[3], r[4], r[5], r[6])
end
if errs then
  out[#KEYS + 1] = errs
end
return table.concat(out)
