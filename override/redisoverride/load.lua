-- load.lua reads every override and the version they are at, atomically.
--
-- KEYS[1]  the overrides, a HASH: principal key -> the override's JSON
-- KEYS[3]  the version, an integer INCRed on every change
--          (KEYS[2], the expiry ZSET, is passed for the slot but not read)
--
-- Returns {version, key1, json1, key2, json2, ...}.
local out = {tonumber(redis.call('GET', KEYS[3]) or '0')}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all do
  out[#out + 1] = all[i]
end
return out
