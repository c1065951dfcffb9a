-- version.lua reads the version (change.lua before it defines the KEYS and
-- version; a Watcher's poll).
--
-- Returns {count, id}.
return version()
