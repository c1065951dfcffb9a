-- purge.lua removes the overrides whose until has passed (expire.lua
-- before it defines purge and the KEYS).
--
-- ARGV[1]  now in ms since the epoch (the caller's clock judges expiry)
--
-- Returns how many were removed.
return purge(ARGV[1])
