-- purge.lua removes the overrides whose until has passed (change.lua
-- before it defines the KEYS, purge and answer).
--
-- ARGV[1]  now in ms since the epoch (the caller's clock judges expiry)
-- ARGV[2]  the id of this change, if it is one
--
-- Returns {removed, count, id}, with the version the store is at.
return answer(purge(ARGV[1], ARGV[2]))
