-- Run at Open (see check.go): calls every command the other scripts call,
-- on KEYS[1], a key of the store's prefix that nothing else uses, and
-- returns one "COMMAND: error" per command that failed (an ACL that does
-- not allow it, a read-only replica, a full server), once however many of
-- its calls failed, or an empty list. The calls use redis.pcall so that
-- every failure is reported, not the first. A WRONGTYPE after a DEL that
-- failed is that failure's consequence (the string SET wrote is still
-- there for ZADD and the rest), not a failure of its own: not reported.
local k = KEYS[1]
local calls = {
  { 'TIME' },
  { 'SET', k, 'probe', 'PX', 10000 },
  { 'GET', k },
  { 'TYPE', k },
  { 'PEXPIRE', k, 10000 },
  { 'DEL', k },
  { 'ZADD', k, 1, 'a', 2, 'b' },
  { 'ZSCORE', k, 'a' },
  { 'ZCOUNT', k, '-inf', '+inf' },
  { 'ZRANGE', k, 0, -1 },
  { 'ZRANGEBYSCORE', k, '-inf', '+inf' },
  { 'ZREVRANGE', k, 0, 1 },
  { 'ZREM', k, 'a' },
  { 'ZREMRANGEBYSCORE', k, '-inf', '+inf' },
  { 'DEL', k },
}
local errs, seen = {}, {}
for i = 1, #calls do
  local r = redis.pcall(unpack(calls[i]))
  local name = calls[i][1]
  if type(r) == 'table' and r.err and not seen[name]
      and not (seen['DEL'] and string.sub(r.err, 1, 9) == 'WRONGTYPE') then
    seen[name] = true
    errs[#errs + 1] = name .. ': ' .. r.err
  end
end
return errs
