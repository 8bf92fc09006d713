-- The entry point. ARGV: the number of groups; the TTL floor (ms) for
-- groups with an explicit time; the number of limits, then each limit's
-- kind and params; then for each group its op, its time (µs; '' for the
-- server's TIME) and its number of requests, and for each request: the
-- limit's index (1-based), cost, lease (a decimal id, kept as a string),
-- at (the time of the take being refunded, for refund and rollback; ''
-- for the group's time; for rollback, followed by '|' and the undo token
-- of the reservation's reply, when it had one). KEYS: the requests' keys
-- in the same order.
--
-- Ops: 't' take (all or nothing over the group), 'T' reserve (a take that
-- also reports, per request, the time its units were stamped with, for
-- the rollback), 'p' peek (writes nothing), 'r' refund, 'b' rollback (undo
-- a reservation, including a concurrency lease's slots), 'l' release,
-- 'n' renew (a concurrency lease's slots expire the lease TTL from now).
--
-- The reply, per group: status (take: 1 if admitted; others: 1), the time
-- used, then per request for take and peek: allowed (0/1), remaining,
-- retry-after (µs, -1 for never), reset-after (µs), delay (µs) (and for
-- reserve the stamp time and the undo token, '' when there is none: see
-- undoTokens); for release and renew: 1 if the lease held
-- slots; for
-- refund and rollback: nothing.
--
-- States follow store/storetest's reference: a state whose ExpiresAt has
-- passed reads as fresh (refund, release and renew leave it alone); a refused
-- take charges nothing and leaves each state as that request alone would
-- (a peek if it would pass, a refused take if not).

local servertime
local function clock()
  if not servertime then
    local t = rcall('TIME')
    servertime = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return servertime
end

local function copystate(st)
  local c = {}
  for k, v in pairs(st) do c[k] = v end
  if st.ring then
    c.ring = {}
    for k, v in pairs(st.ring) do c.ring[k] = v end
  end
  return c
end

local function restore(st, snap)
  for k, v in pairs(snap) do st[k] = v end
end

-- undoTokens returns, per request of an admitted reservation whose state
-- is three fields (A, B, C) that a refund cannot restore exactly (the
-- smooth algorithms: stored permits spent are not given back), what its
-- rollback needs to restore the state the reservation found: on the last
-- request of each such state, the fields before and after the
-- reservation and the state's total cost, space-separated; '-' on the
-- others (the last one's rollback, which runs first, covers them). Other
-- requests get none: their rollback or refund is exact.
local function undoTokens(reqs, order, snaps)
  local snapOf, last, total = {}, {}, {}
  for i = 1, #order do snapOf[order[i].st] = snaps[i] end
  for r = 1, #reqs do
    local q = reqs[r]
    if q.h.restore3 then
      last[q.st] = r
      total[q.st] = (total[q.st] or 0) + q.cost
    end
  end
  local t = {}
  for r = 1, #reqs do
    local st = reqs[r].st
    if last[st] == r then
      local b = snapOf[st]
      t[r] = table.concat({ num(b.a), num(b.b), num(b.c), num(st.a), num(st.b), num(st.c), num(total[st]) }, ' ')
    elseif last[st] then
      t[r] = '-'
    end
  end
  return t
end

-- undoReserve rolls back q's reservation with its undo token (see
-- undoTokens): the state goes back to what the reservation found if it
-- still holds what the reservation left, as memcached's compare-and-swap
-- does; otherwise (a take came between) the cost is refunded.
local function undoReserve(q, now, at, undo)
  if undo == '-' then return end
  local v, i = {}, 0
  for w in string.gmatch(undo, '%S+') do
    i = i + 1
    v[i] = tonumber(w)
  end
  local st = q.st
  if st.a == v[4] and st.b == v[5] and st.c == v[6] then
    st.a, st.b, st.c = v[1], v[2], v[3]
  elseif v[7] > 0 then
    q.h.refund(st, q.p, now, at, v[7])
  end
end

local out, o = {}, 0
local function emit(v)
  o = o + 1
  out[o] = v
end

-- put emits a decision (the first five of decide's results) and returns
-- whether it admitted.
local function put(allowed, rem, retry, reset, delay)
  out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = allowed, rem, retry, reset, delay
  o = o + 5
  return allowed
end

local testTTL = tonumber(ARGV[2]) or 0
local specs, ai = {}, 4
for i = 1, tonumber(ARGV[3]) do
  local h = handler(tonumber(ARGV[ai]))
  if not h then return redis.error_reply('floodgate: unknown algorithm ' .. tostring(ARGV[ai])) end
  local p = h.parse(ARGV, ai + 1)
  p.kind = tonumber(ARGV[ai])
  specs[i] = { h = h, p = p }
  ai = ai + 1 + h.np
end

local ki = 1
for _ = 1, tonumber(ARGV[1]) do
  local op, tnow = ARGV[ai], ARGV[ai + 1]
  local nreq = tonumber(ARGV[ai + 2])
  ai = ai + 3
  local now
  if tnow == '' then
    now, minTTL, ttlFrom = clock(), 0, nil
  else
    now, minTTL, ttlFrom = clamp(tonumber(tnow)), testTTL, nil
    -- An explicit time without a test clock's floor is another node's
    -- TIME: TTLs count from this server's, if it is behind (see ttlFrom).
    if testTTL == 0 and op ~= 'p' then ttlFrom = clock() end
  end

  if op == 't' and nreq == 1 then
    -- The common case, kept free of bookkeeping.
    local sp = specs[tonumber(ARGV[ai])]
    local h, p = sp.h, sp.p
    local base = o
    o = o + 2
    local st = h.load(KEYS[ki], p, false)
    if h.expires(st, p) <= now then h.fresh(st) end
    out[base + 1] = put(h.decide(st, p, now, tonumber(ARGV[ai + 1]), ARGV[ai + 2], true))
    h.save(st, p, now)
    out[base + 2] = now
    ai, ki = ai + 4, ki + 1
  else
    -- Parse the group; requests on the same key share one state.
    local ro = op == 'p'
    local reqs, states, order = {}, {}, {}
    for r = 1, nreq do
      local sp = specs[tonumber(ARGV[ai])]
      local h, p = sp.h, sp.p
      local key = KEYS[ki]
      local sk = ARGV[ai] .. ':' .. key
      local st = states[sk]
      if not st then
        st = h.load(key, p, ro, op == 'r' or op == 'l' or op == 'n')
        if h.expires(st, p) <= now then
          if op == 't' or op == 'T' or op == 'p' then
            h.fresh(st)
          else
            st.expired = true -- refund, release and renew leave it alone
          end
        end
        states[sk] = st
        if not st.expired then order[#order + 1] = { h = h, st = st, p = p } end
      end
      reqs[r] = { h = h, p = p, st = st, cost = tonumber(ARGV[ai + 1]), lease = ARGV[ai + 2], at = ARGV[ai + 3] }
      ai, ki = ai + 4, ki + 1
    end

    if op == 't' or op == 'T' then
      -- (A take of one request runs above; a reservation of one goes
      -- through the peek first too, for its snapshot.)
      local ds, ok = {}, true
      -- Decide every request alone first, charging nothing.
      for r = 1, nreq do
        local q = reqs[r]
        ds[r] = { q.h.decide(q.st, q.p, now, q.cost, q.lease, false) }
        if ds[r][1] ~= 1 then
          ok = false
          ds[r] = { q.h.decide(q.st, q.p, now, q.cost, q.lease, true) }
        end
      end
      local snaps = {}
      if ok then
        -- All pass alone: charge them in order.
        for i = 1, #order do snaps[i] = copystate(order[i].st) end
        local charged, d2 = {}, {}
        for r = 1, nreq do
          local q = reqs[r]
          local d = { q.h.decide(q.st, q.p, now, q.cost, q.lease, true) }
          d2[r] = d
          if d[1] ~= 1 then
            -- Only a key named twice can get here: undo the charges
            -- (sorted sets by rollback, strings by their snapshots) and
            -- report each request alone.
            ok = false
            for j = #charged, 1, -1 do
              local c = reqs[charged[j]]
              if c.h.rollback then c.h.rollback(c.st, c.p, now, d2[charged[j]][6], c.cost, c.lease) end
            end
            for i = 1, #order do restore(order[i].st, snaps[i]) end
            break
          end
          charged[#charged + 1] = r
        end
        if ok then ds = d2 end
      end
      for i = 1, #order do order[i].h.save(order[i].st, order[i].p, now) end
      emit(ok and 1 or 0)
      emit(now)
      local undos = {}
      if op == 'T' and ok then undos = undoTokens(reqs, order, snaps) end
      for r = 1, nreq do
        local d = ds[r]
        put(d[1], d[2], d[3], d[4], d[5])
        if op == 'T' then
          emit(d[6])
          emit(undos[r] or '')
        end
      end
    elseif op == 'p' then
      emit(1)
      emit(now)
      for r = 1, nreq do
        local q = reqs[r]
        put(q.h.decide(q.st, q.p, now, q.cost, q.lease, false))
      end
    elseif op == 'r' or op == 'b' then
      for r = 1, nreq do
        local q = reqs[r]
        local at, undo = now, nil
        local qat = q.at
        if op == 'b' then
          local bar = string.find(qat, '|', 1, true)
          if bar then qat, undo = sub(qat, 1, bar - 1), sub(qat, bar + 1) end
        end
        if qat ~= '' then at = clamp(tonumber(qat)) end
        if q.st.expired then
          -- Nothing left to give back.
        elseif undo then
          undoReserve(q, now, at, undo)
        elseif op == 'b' and q.h.rollback then
          q.h.rollback(q.st, q.p, now, at, q.cost, q.lease)
        elseif q.cost > 0 then
          q.h.refund(q.st, q.p, now, at, q.cost)
        end
      end
      for i = 1, #order do order[i].h.save(order[i].st, order[i].p, now) end
      emit(1)
      emit(now)
    elseif op == 'l' or op == 'n' then
      -- Release or renew: the handler's function of that name, for the
      -- algorithms that have one (concurrency).
      local fn = op == 'l' and 'release' or 'renew'
      emit(1)
      emit(now)
      for r = 1, nreq do
        local q = reqs[r]
        local found = false
        if q.h[fn] and not q.st.expired then found = q.h[fn](q.st, q.p, now, q.lease) end
        emit(found and 1 or 0)
      end
      for i = 1, #order do
        if order[i].h[fn] then order[i].h.save(order[i].st, order[i].p, now) end
      end
    else
      return redis.error_reply('floodgate: unknown op ' .. tostring(op))
    end
  end
end
return out
