-- load.lua reads every override and the version they are at, atomically
-- (change.lua before it defines the KEYS, CHANGE and version; KEYS[2], the
-- expiry ZSET, is passed for the slot but not read).
--
-- Returns {count, id, key1, json1, key2, json2, ...}.
local out = version()
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  if all[i] ~= CHANGE then
    out[#out + 1] = all[i]
    out[#out + 1] = all[i + 1]
  end
end
return out
