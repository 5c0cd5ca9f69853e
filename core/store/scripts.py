"""The Lua scripts of the product, with what each expects in KEYS and ARGV and what it returns,
and the one registry of every script (``SOURCES``; ``scripts.of(client).call(name, …)``): the six
of the shuffler's journaled releases and discards (``DISCARD``, ``RELEASE_*``) are written in
``ldptel.store.release_scripts`` and registered here with the others.

Each script touches the keys of one (campaign, shard) hash tag (``ldptel.keys``), or one
process-wide key, so it runs on one Redis Cluster node. A script is atomic, also in the AOF:
that is what makes a stored batch, its dedupe marker and its counters (``INGEST``), a shuffled
release and the deletion of its ingress entries (``SHUFFLE``), and the aggregator state and the
XACK of the entries it includes (``COMMIT``), move together.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from typing import Any

from redis.cluster import RedisCluster
from redis.exceptions import NoScriptError

from ldptel.store import release_scripts

# The next entry id of a stream for entries of window ``window_s`` (epoch s), shared by INGEST and
# SHUFFLE: ``<window start ms>-<n>``, never a receive time, so an id holds no time finer than
# the window. Ids must grow, so after an entry of a later window (a collector whose clock is behind
# another's, or a shuffler releasing an older window after a newer one) the id takes that window's
# ms. ``0-0`` is not a valid id: the "all" window's first entry is ``0-1``.
# Returns ms, seq (the caller formats '%d-%d' and increments seq for further entries).
_NEXT_ID = """
local function next_id(stream, window_s)
  local ms, seq = tonumber(window_s) * 1000, 0
  local info = redis.pcall('XINFO', 'STREAM', stream)
  if info.err == nil then
    for i = 1, #info, 2 do
      if info[i] == 'last-generated-id' then
        local last_ms, last_seq = string.match(info[i + 1], '^(%d+)-(%d+)$')
        if tonumber(last_ms) >= ms then ms, seq = tonumber(last_ms), tonumber(last_seq) + 1 end
        break
      end
    end
  end
  if ms == 0 and seq == 0 then seq = 1 end
  return ms, seq
end
"""

# The next id of a stream the collector appends to, from the last id it added (KEYS: its top key,
# keys.ingress_top_key / stream_top_key), not XINFO: the collector may only append and read lengths.
# Same rule as next_id. A stream whose top key is missing or behind (entries added before the key
# existed) refuses the XADD: the script then moves the sequence past any that one window can hold
# (2^40) and tries once more.
_TRACKED_ID = """
local function tracked_id(top_key, window_s)
  local ms, seq = tonumber(window_s) * 1000, 0
  local top = redis.call('GET', top_key)
  if top then
    local last_ms, last_seq = string.match(top, '^(%d+)-(%d+)$')
    if last_ms and tonumber(last_ms) >= ms then ms, seq = tonumber(last_ms), tonumber(last_seq) + 1 end
  end
  if ms == 0 and seq == 0 then seq = 1 end
  return ms, seq
end
"""

# Lower an ingress group's count (keys.ingress_groups_key) by the entries a move or discard deleted;
# the field goes at 0 (never below: entries stored before the groups existed are not counted).
_GROUP_DONE = """
local function group_done(groups, field, n)
  if not groups or not field or field == '' then return end
  if redis.call('HINCRBY', groups, field, -tonumber(n)) <= 0 then redis.call('HDEL', groups, field) end
end
"""

# Lower the ingress entries sealed to each analyzer key (keys.sealed_keys_key, field k:<key id hex>)
# by the entries a move or discard deleted, ``spec`` = "<key id hex>=<entries>,…" (the field goes at
# 0); with ``last`` (a release's last analysis entry id) also record it as a:<key id hex> in
# ``holds`` (keys.key_holds_key): the key is needed until the aggregator acknowledged every entry
# up to it (ldptel.store.key_refs).
_KEYS_DONE = """
local function keys_done(refs, holds, spec, last)
  if not refs or not spec or spec == '' then return end
  for kid, n in string.gmatch(spec, '(%x+)=(%d+)') do
    local field = 'k:' .. kid
    if redis.call('HINCRBY', refs, field, -tonumber(n)) <= 0 then redis.call('HDEL', refs, field) end
    if holds and last and last ~= '' then redis.call('HSET', holds, 'a:' .. kid, last) end
  end
end
"""

# Store one batch unless its batch_id was seen; count accepted / duplicate batches and reports.
# KEYS[1] dedupe marker (keys.seen_key), KEYS[2] target stream: the ingress stream
#      (keys.ingress_key) with the shuffler enabled, else the analysis stream (keys.stream_key),
#      KEYS[3] collector counters (keys.metrics_key: fields keys.ACCEPTED_* / keys.DUPLICATE_*),
#      KEYS[4] the target's top key (keys.ingress_top_key / stream_top_key),
#      KEYS[5] (optional) the ingress groups hash (keys.ingress_groups_key), KEYS[6] (optional, a
#      sealed envelope) the stream's analyzer-key hash (keys.sealed_keys_key)
# ARGV[1] marker expiry, epoch s (keys.dedupe_expire_at: a multiple of max(window, 1 day)),
#      ARGV[2] serialized ReportBatch, ARGV[3] window start (epoch s), ARGV[4] reports in the batch,
#      ARGV[5] the most entries the target may hold (0: no bound; [shuffler] max_ingress_batches),
#      ARGV[6] with KEYS[5]: the batch's group (keys.ingress_group), ARGV[7] with KEYS[6]: the
#      analyzer key id (hex) the envelope is sealed to (field k:<id> bumped with the XADD)
# Returns the new entry id, nil for a duplicate, or 'full' (nothing written) when the bound is
# reached: with KEYS[5] the batch's (version, window, cell) group holds ARGV[5] entries (issue 34:
# one group that cannot reach batch_min never refuses another group), without it the target
# stream does. The caller answers 503, the device sends it again; no accepted report is trimmed.
# The group's count is bumped with the XADD; the shuffler's moves and discards lower it with
# their XDEL (SHUFFLE, DISCARD, RELEASE_STEP), so it is the group's entries in ingress, exactly.
# The entry id comes from tracked_id (_TRACKED_ID): the window start, not the receive time. The
# marker holds "1", not the id, and expires at a time rounded to the day (or window).
# EXISTS → XADD → SET: a failing XADD (e.g. OOM) leaves no marker, so the retry is not lost.
INGEST = _TRACKED_ID + """
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HINCRBY', KEYS[3], 'duplicate_batches', 1)
  redis.call('HINCRBY', KEYS[3], 'duplicate_reports', ARGV[4])
  return false
end
local bound = tonumber(ARGV[5] or '0')
if bound > 0 then
  if KEYS[5] then
    if tonumber(redis.call('HGET', KEYS[5], ARGV[6]) or '0') >= bound then return 'full' end
  elseif redis.call('XLEN', KEYS[2]) >= bound then
    return 'full'
  end
end
local ms, seq = tracked_id(KEYS[4], ARGV[3])
local fields = {'batch', ARGV[2], 'window', ARGV[3], 'count', ARGV[4]}
local id = redis.pcall('XADD', KEYS[2], string.format('%d-%d', ms, seq), unpack(fields))
if type(id) == 'table' and id.err then
  seq = seq + 1099511627776
  id = redis.call('XADD', KEYS[2], string.format('%d-%d', ms, seq), unpack(fields))
end
redis.call('SET', KEYS[4], id)
if KEYS[5] then redis.call('HINCRBY', KEYS[5], ARGV[6], 1) end
if KEYS[6] then redis.call('HINCRBY', KEYS[6], 'k:' .. ARGV[7], 1) end
redis.call('SET', KEYS[1], '1')
redis.call('EXPIREAT', KEYS[1], ARGV[1])
redis.call('HINCRBY', KEYS[3], 'accepted_batches', 1)
redis.call('HINCRBY', KEYS[3], 'accepted_reports', ARGV[4])
return id
"""

# A shard's sealed envelopes handed to shard 0 (ldptel.shuffler.handoff: a shuffled campaign's
# (version, window, cell) group is released once, by shard 0, across shards), the first of two
# steps: add each envelope to shard 0's ingress unless its marker says it was added before.
# KEYS[1] shard 0's ingress stream, KEYS[2] its top key (keys.ingress_top_key), KEYS[3] its ingress
#      groups hash, KEYS[4] its keys.sealed_keys_key, KEYS[5..] one marker per envelope
#      (keys.handed_key, by batch id)
# ARGV[1] marker expiry (epoch s), then per envelope: serialized envelope, window start, reports,
#      group (keys.ingress_group), analyzer key id (hex)
# Returns the envelopes added (a marker already set: skipped, it was added by an earlier call).
# Exactly once: the marker is set with the XADD in one atomic script, so an envelope is added to
# shard 0 at most once, however often a shuffler retries (its source entry is deleted after, by
# HANDOFF_DEL: a crash in between leaves it in its shard, and the retry finds the marker).
HANDOFF = _TRACKED_ID + """
local added = 0
for i = 5, #KEYS do
  local a = 2 + (i - 5) * 5
  if redis.call('SET', KEYS[i], '1', 'NX') then
    redis.call('EXPIREAT', KEYS[i], ARGV[1])
    local ms, seq = tracked_id(KEYS[2], ARGV[a + 1])
    local fields = {'batch', ARGV[a], 'window', ARGV[a + 1], 'count', ARGV[a + 2]}
    local id = redis.pcall('XADD', KEYS[1], string.format('%d-%d', ms, seq), unpack(fields))
    if type(id) == 'table' and id.err then
      seq = seq + 1099511627776
      id = redis.call('XADD', KEYS[1], string.format('%d-%d', ms, seq), unpack(fields))
    end
    redis.call('SET', KEYS[2], id)
    redis.call('HINCRBY', KEYS[3], ARGV[a + 3], 1)
    redis.call('HINCRBY', KEYS[4], 'k:' .. ARGV[a + 4], 1)
    added = added + 1
  end
end
return added
"""

# The second step of a handoff (HANDOFF): delete the handed envelopes from their shard's ingress.
# KEYS[1] the shard's ingress stream, KEYS[2] its ingress groups hash, KEYS[3] its
#      keys.sealed_keys_key, KEYS[4] its release journal (keys.release_key)
# ARGV: per entry (entry id, group, analyzer key id hex)
# Returns {'ok', n deleted} (an entry already gone was deleted by another shuffler, which lowered
# the counts: skipped), or {'busy'} while a journaled release holds the stream (nothing written).
HANDOFF_DEL = """
if redis.call('EXISTS', KEYS[4]) == 1 then return {'busy'} end
local n = 0
for a = 1, #ARGV, 3 do
  if redis.call('XDEL', KEYS[1], ARGV[a]) == 1 then
    if redis.call('HINCRBY', KEYS[2], ARGV[a + 1], -1) <= 0 then redis.call('HDEL', KEYS[2], ARGV[a + 1]) end
    local field = 'k:' .. ARGV[a + 2]
    if redis.call('HINCRBY', KEYS[3], field, -1) <= 0 then redis.call('HDEL', KEYS[3], field) end
    n = n + 1
  end
end
return {'ok', tostring(n)}
"""

# The shuffler's release (ldptel.shuffler): move one (version, window) group of ingress entries,
# permuted and re-packed into new batches, to the analysis stream — all or nothing.
# KEYS[1] ingress stream (keys.ingress_key), KEYS[2] analysis stream (keys.stream_key),
#      KEYS[3] shuffler counters (keys.shuffle_metrics_key: keys.INGRESS_*, keys.ANALYSIS_*,
#      keys.SHUFFLE_REFUSED), KEYS[4] (optional) the stream's release journal (keys.release_key),
#      KEYS[5] (optional) the ingress groups hash (keys.ingress_groups_key), KEYS[6], KEYS[7]
#      (optional, a sealed release) the stream's keys.sealed_keys_key and keys.key_holds_key
# ARGV[1] n_ids, ARGV[2] reports in those ingress entries, ARGV[3] window start (epoch s),
#      ARGV[4] n_batches, then n_ids ingress entry ids, then n_batches (batch, count) pairs, then
#      (optional, with KEYS[5]) the entries' group (keys.ingress_group): lowered by n_ids, then
#      (with KEYS[6]) the entries per analyzer key, "<key id hex>=<n>,…" (_KEYS_DONE)
# Returns {'ok', n_batches}; if an ingress entry is gone, {'refused', id} with nothing written
# but the 'refused' counter; {'busy'} (nothing written) while a journaled release holds the stream
# (ldptel.store.release_scripts: releases too large for one bounded call).
# Exactly once: (1) every given ingress id must still exist (XRANGE id id); if one is gone,
# another shuffler (or this one, before its lease lapsed) already moved it, and nothing is written.
# (2) the new batches are XADDed (ids from next_id: the window start, so they hold no receive time,
# batch id or grouping), (3) the ingress entries are XDELed, (4) the counters bumped. A script is
# atomic (also in the AOF): a crash before it leaves every report in ingress, after it every
# report in the analysis stream; no state in between exists. So a report is moved exactly once,
# whatever dies when, and however many shufflers race.
SHUFFLE = _NEXT_ID + _GROUP_DONE + _KEYS_DONE + """
if KEYS[4] and redis.call('EXISTS', KEYS[4]) == 1 then return {'busy'} end
local n_ids, n_batches = tonumber(ARGV[1]), tonumber(ARGV[4])
local ids = {}
for i = 1, n_ids do
  local id = ARGV[4 + i]
  if #redis.call('XRANGE', KEYS[1], id, id) == 0 then
    redis.call('HINCRBY', KEYS[3], 'refused', 1)
    return {'refused', id}
  end
  ids[i] = id
end
local ms, seq = next_id(KEYS[2], ARGV[3])
local reports, a = 0, 4 + n_ids
for _ = 1, n_batches do
  redis.call('XADD', KEYS[2], string.format('%d-%d', ms, seq),
             'batch', ARGV[a + 1], 'window', ARGV[3], 'count', ARGV[a + 2])
  reports = reports + tonumber(ARGV[a + 2])
  seq, a = seq + 1, a + 2
end
for s = 1, #ids, 1000 do
  redis.call('XDEL', KEYS[1], unpack(ids, s, math.min(s + 999, #ids)))
end
group_done(KEYS[5], ARGV[a + 1], n_ids)
local last = n_batches > 0 and string.format('%d-%d', ms, seq - 1) or ''
keys_done(KEYS[6], KEYS[7], ARGV[a + 2], last)
redis.call('HINCRBY', KEYS[3], 'ingress_batches', n_ids)
redis.call('HINCRBY', KEYS[3], 'ingress_reports', ARGV[2])
redis.call('HINCRBY', KEYS[3], 'analysis_batches', n_batches)
redis.call('HINCRBY', KEYS[3], 'analysis_reports', reports)
return {'ok', tostring(n_batches)}
"""

# Take, keep or give up a lease (the shuffler's per-stream lease, keys.shuffle_lease_key).
# KEYS[1] lease key; ARGV[1] owner id, ARGV[2] lease length (ms; 0: give it up)
# Returns 1 if the caller holds the lease now (taken, or renewed) or gave it up, 0 if another
# owner holds it.
LEASE = """
local cur = redis.call('GET', KEYS[1])
if cur and cur ~= ARGV[1] then return 0 end
if tonumber(ARGV[2]) == 0 then
  if cur then redis.call('DEL', KEYS[1]) end
  return 1
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""

# Count one failed authentication against each counter of KEYS (each expires one window after its
# first failure; a counter found without a TTL gets one, so none outlives its window).
# KEYS[1..n] failure counters (keys.auth_failure_key; all under one hash tag)
# ARGV[1] window in seconds
# Returns {count, seconds left} for each key, in order.
AUTH_FAILURE = """
local out = {}
for _, key in ipairs(KEYS) do
  local n = redis.call('INCR', key)
  local ttl = redis.call('TTL', key)
  if ttl < 0 then
    redis.call('EXPIRE', key, ARGV[1])
    ttl = tonumber(ARGV[1])
  end
  out[#out + 1] = n
  out[#out + 1] = ttl
end
return out
"""

# All accumulator fields of one window of a state hash, read atomically.
# KEYS[1] state hash (keys.state_key)
# ARGV[1] field prefix ``acc:<window>:`` (keys.acc_field)
# Returns the values of the fields whose name starts with ARGV[1].
READ_WINDOW = """
local out = {}
for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
  if string.sub(field, 1, #ARGV[1]) == ARGV[1] then
    out[#out + 1] = redis.call('HGET', KEYS[1], field)
  end
end
return out
"""

# The aggregator's commit (ldptel.aggregator.worker): check, replace state fields, count, XACK.
# KEYS[1] stream (keys.stream_key), KEYS[2] state hash (keys.state_key), KEYS[3] its counters
#      (keys.counts_key)
# ARGV[1] group, ARGV[2] consumer, ARGV[3..7] n_ids, n_del, n_set, n_incr, n_cset, then
#      n_ids entry ids        (each must still be pending to ARGV[2], else {'lost', id})
#      n_del field names      (each must still exist in the state, else {'stale', field}; then deleted)
#      n_set (field, value)   pairs written to the state with HSET
#      n_incr (field, amount) pairs added to the counters with HINCRBY
#      n_cset (field, value)  pairs written to the counters with HSET
# Returns {'ok', acknowledged count}; on 'lost' / 'stale' nothing was written.
COMMIT = """
local group, consumer = ARGV[1], ARGV[2]
local n_ids, n_del, n_set, n_incr = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local n_cset = tonumber(ARGV[7])
local i = 8
local ids = {}
for _ = 1, n_ids do
  local id = ARGV[i]; i = i + 1
  if #redis.call('XPENDING', KEYS[1], group, id, id, 1, consumer) == 0 then
    return {'lost', id}
  end
  ids[#ids + 1] = id
end
local dels = {}
for _ = 1, n_del do
  local f = ARGV[i]; i = i + 1
  if redis.call('HEXISTS', KEYS[2], f) == 0 then return {'stale', f} end
  dels[#dels + 1] = f
end
for _, f in ipairs(dels) do redis.call('HDEL', KEYS[2], f) end
for _ = 1, n_set do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1]); i = i + 2
end
for _ = 1, n_incr do
  redis.call('HINCRBY', KEYS[3], ARGV[i], ARGV[i + 1]); i = i + 2
end
for _ = 1, n_cset do
  redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1]); i = i + 2
end
local acked = 0
for s = 1, #ids, 1000 do
  acked = acked + redis.call('XACK', KEYS[1], group, unpack(ids, s, math.min(s + 999, #ids)))
end
return {'ok', tostring(acked)}
"""

# Publish a window's decoded estimate unless a document decoded from more reports is stored
# (report counts only grow, so a slower publisher never overwrites a newer state's document).
# KEYS[1] published hash (keys.published_key)
# ARGV[1] reports decoded, then (field, value) pairs written with one HSET (the fields not
#      given are deleted first, so the hash never mixes two publications)
# Returns 1 if written, 0 if a newer document was kept.
PUBLISH = """
local stored = redis.call('HGET', KEYS[1], 'n')
if stored and tonumber(stored) > tonumber(ARGV[1]) then return 0 end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'n', ARGV[1], unpack(ARGV, 2))
return 1
"""

# Claim the next publication of a window for this worker unless any worker started one less
# than the caller's gap ago (the shared publication throttle of ``publish.Publisher``).
# KEYS[1] publish claim key; ARGV[1] now (epoch ms), ARGV[2] gap (ms), ARGV[3] TTL of the claim (ms)
# Returns 1 if claimed (the claim now holds ARGV[1]), 0 if a publication started too recently.
PUBLISH_CLAIM = """
local last = redis.call('GET', KEYS[1])
if last and tonumber(ARGV[1]) - tonumber(last) < tonumber(ARGV[2]) then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
return 1
"""

# Compare-and-set of one campaign's registry record (ldptel.store.registry), bumping the revision and
# appending the change to the campaign's history, in one step.
# KEYS[1] registry hash (keys.REGISTRY_KEY), KEYS[2] revision counter (keys.REGISTRY_REVISION_KEY),
#      KEYS[3] the campaign's history list (keys.registry_history_key)
# ARGV[1] campaign name, ARGV[2] the record as read ("" if there was none), ARGV[3] new record,
#      ARGV[4] the history entry (JSON)
# Returns the new revision, or 0 (nothing written) if the record changed since it was read.
REGISTRY_PUT = """
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if (cur or '') ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('RPUSH', KEYS[3], ARGV[4])
return redis.call('INCR', KEYS[2])
"""

# Remove a consumer only if it owns no pending entry (checked atomically with the removal).
# KEYS[1] stream; ARGV[1] group, ARGV[2] consumer
# Returns the pending count XGROUP DELCONSUMER reports (0 when it was not removed).
DELCONSUMER = """
if #redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2]) > 0 then return 0 end
return redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
"""

# XAUTOCLAIM … JUSTID, returning (next cursor, number claimed) (redis-py drops the cursor).
# KEYS[1] stream; ARGV[1] group, ARGV[2] new owner, ARGV[3] min idle ms, ARGV[4] start id,
#      ARGV[5] count
# Returns {next cursor, number of entries claimed}.
AUTOCLAIM = """
local r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], 'COUNT', ARGV[5], 'JUSTID')
return {r[1], #r[2]}
"""

# Delete every field of the given windows from a state hash (retention), adding their report and
# entry counters to the running totals of expired windows, so the collector-vs-aggregator lag
# stays right after the counters are gone.
# KEYS[1] state hash (keys.state_key), KEYS[2] its counters (keys.counts_key)
# ARGV    window starts (epoch s) to delete
# Fields: ``acc:<w>:<uid>`` (state); ``n:<w>``, ``entries:<w>``, ``updated:<w>``, ``rel:<w>:<id>`` (counters);
# totals ``expired_reports`` (sum of n:<w>) and ``expired_entries`` (sum of entries:<w>).
# Returns the number of fields deleted.
EXPIRE_WINDOWS = """
local gone, kinds = {}, {acc = true, n = true, entries = true, updated = true, rel = true,
                     replayed = true}
for _, w in ipairs(ARGV) do gone[w] = true end
local deleted = 0
for k = 1, 2 do
  for _, f in ipairs(redis.call('HKEYS', KEYS[k])) do
    local prefix, w = string.match(f, '^(%a+):(%d+)')
    if prefix and kinds[prefix] and gone[w] then
      if prefix == 'n' then
        redis.call('HINCRBY', KEYS[2], 'expired_reports', redis.call('HGET', KEYS[k], f))
      elseif prefix == 'entries' then
        redis.call('HINCRBY', KEYS[2], 'expired_entries', redis.call('HGET', KEYS[k], f))
      end
      redis.call('HDEL', KEYS[k], f)
      deleted = deleted + 1
    end
  end
end
return deleted
"""

# Whether a stream still needs analyzer keys past their grace (ldptel.store.key_refs), the keyring's
# side: a key is needed until the shuffler answered that no ingress entry is sealed to it (f:<id>;
# else the question q:<id> is asked), and while an analysis entry up to the last one of a release
# holding its messages (a:<id>) is not yet acknowledged by the aggregator's group (not yet delivered
# to it, or pending).
# KEYS[1] the stream's keys.key_holds_key, KEYS[2] the analysis stream (keys.stream_key)
# ARGV[1] the aggregator's consumer group (keys.GROUP), then key ids (hex)
# Returns one character per key id: '1' needed, '0' not.
KEYS_HELD = """
local function before(a, b)  -- stream id a < b
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
  return am < bm or (am == bm and as < bs)
end
local delivered = nil
local info = redis.pcall('XINFO', 'GROUPS', KEYS[2])
if info.err == nil then
  for _, g in ipairs(info) do
    local name, last = nil, nil
    for i = 1, #g, 2 do
      if g[i] == 'name' then name = g[i + 1] elseif g[i] == 'last-delivered-id' then last = g[i + 1] end
    end
    if name == ARGV[1] then delivered = last end
  end
end
local out = {}
for i = 2, #ARGV do
  local kid, need = ARGV[i], '0'
  if redis.call('HEXISTS', KEYS[1], 'f:' .. kid) == 0 then
    redis.call('HSET', KEYS[1], 'q:' .. kid, '1')
    need = '1'
  else
    local last = redis.call('HGET', KEYS[1], 'a:' .. kid)
    if last then
      if not delivered or before(delivered, last) then
        need = '1'
      elseif #redis.call('XPENDING', KEYS[2], ARGV[1], '-', last, 1) > 0 then
        need = '1'
      end
    end
  end
  out[#out + 1] = need
end
return table.concat(out)
"""

# The shuffler's answer to the keyring's questions (KEYS_HELD): each asked key (q:<id>) to which no
# ingress entry is sealed any more gets f:<id>. Asked only of keys the collector no longer takes,
# so the answer is final; the aggregator learns nothing about arrivals of the keys in use.
# KEYS[1] the stream's keys.sealed_keys_key, KEYS[2] its keys.key_holds_key
# Returns the number of keys answered.
KEYS_FREE = """
local answered = 0
for _, f in ipairs(redis.call('HKEYS', KEYS[2])) do
  local kid = string.match(f, '^q:(%x+)$')
  if kid and tonumber(redis.call('HGET', KEYS[1], 'k:' .. kid) or '0') <= 0 then
    redis.call('HSET', KEYS[2], 'f:' .. kid, '1')
    redis.call('HDEL', KEYS[2], f)
    answered = answered + 1
  end
end
return answered
"""

def _with_token(ingest: str) -> str:
    """``INGEST`` behind a spent-token check (issue 37): KEYS[1] the spent set (keys.spent_key),
    ARGV[1] the token's digest, ARGV[2] the set's expiry (epoch s), then INGEST's own KEYS and ARGV.
    Returns 'spent' (nothing written) for a token already in the set, unless the envelope itself
    was stored already (its batch id seen: a retry is a duplicate, as without tokens); the digest
    is added with the XADD, in the same script, so a token is spent exactly when its envelope is
    stored (a duplicate batch_id or a full ingress spends nothing)."""
    body = ingest[len(_TRACKED_ID):].replace("KEYS[", "K[").replace("ARGV[", "A[")
    head, sep, tail = body.rpartition("\nreturn id\n")
    assert sep, "INGEST ends with 'return id'"
    return (_TRACKED_ID + "local K, A = {unpack(KEYS, 2)}, {unpack(ARGV, 3)}\n"
            "if redis.call('EXISTS', K[1]) == 0 and redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then\n"
            "  return 'spent'\n"
            "end\n"
            + head + "\nredis.call('SADD', KEYS[1], ARGV[1])\nredis.call('EXPIREAT', KEYS[1], ARGV[2])"
            + sep + tail)


INGEST_TOKEN = _with_token(INGEST)

# Grant up to ARGV[1] tokens to one subject in one issuer window (the issuer's quota, issue 37).
# KEYS[1] keys.issuer_quota_key; ARGV[1] tokens asked, ARGV[2] tokens_per_window, ARGV[3] expiry
# (epoch s: the window's end). Returns the count after the grant, or -1 (nothing written) when the
# grant would pass the limit.
ISSUE_QUOTA = """
local have = tonumber(redis.call('GET', KEYS[1]) or '0')
if have + tonumber(ARGV[1]) > tonumber(ARGV[2]) then return -1 end
local now = redis.call('INCRBY', KEYS[1], ARGV[1])
redis.call('EXPIREAT', KEYS[1], ARGV[3])
return now
"""

# Record the messages one sealed release opened with one analyzer key (ldptel.store.opened): each
# encapsulated key (enc) not yet recorded is recorded for this release; one recorded for this release
# before (the same release decoded again after a worker died before its commit) is still its own;
# one recorded for another release is a replay. Idempotent per release, so exactly once without
# sharing the commit's hash tag.
# KEYS[1] the key's record (keys.opened_key); ARGV[1] the release's tag, ARGV[2] epoch s at which
# the record expires (the key's deletion: the same for every call of one key; '' for none), then
# the encs
# Returns one character per enc: '1' this release's, '0' a replay.
OPENED_CLAIM = """
local out = {}
for i = 3, #ARGV do
  local cur = redis.call('HGET', KEYS[1], ARGV[i])
  if not cur then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[1])
    out[#out + 1] = '1'
  elseif cur == ARGV[1] then
    out[#out + 1] = '1'
  else
    out[#out + 1] = '0'
  end
end
if ARGV[2] ~= '' and #out > 0 then redis.call('EXPIREAT', KEYS[1], ARGV[2]) end
return table.concat(out)
"""

# Move the counters a state hash held before they got their own hash (keys.counts_key): sums
# added, ``updated:<w>`` the later of both. Atomic, and idempotent (a moved field is gone).
# KEYS[1] state hash, KEYS[2] counters hash. Returns the number of fields moved.
MOVE_COUNTERS = """
local moved = 0
for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
  if string.sub(f, 1, 4) ~= 'acc:' then
    local v = redis.call('HGET', KEYS[1], f)
    if string.sub(f, 1, 8) == 'updated:' then
      local cur = redis.call('HGET', KEYS[2], f)
      if not cur or tonumber(cur) < tonumber(v) then redis.call('HSET', KEYS[2], f, v) end
    else
      redis.call('HINCRBY', KEYS[2], f, v)
    end
    redis.call('HDEL', KEYS[1], f)
    moved = moved + 1
  end
end
return moved
"""


# --- the registry: every script registered once per Redis client, called by name ------------

SOURCES: dict[str, str] = {
    "INGEST": INGEST, "SHUFFLE": SHUFFLE, "DISCARD": release_scripts.discard(_KEYS_DONE),
    "LEASE": LEASE,
    "AUTH_FAILURE": AUTH_FAILURE,
    "READ_WINDOW": READ_WINDOW, "COMMIT": COMMIT, "PUBLISH": PUBLISH, "PUBLISH_CLAIM": PUBLISH_CLAIM,
    "REGISTRY_PUT": REGISTRY_PUT, "DELCONSUMER": DELCONSUMER, "AUTOCLAIM": AUTOCLAIM,
    "EXPIRE_WINDOWS": EXPIRE_WINDOWS, "MOVE_COUNTERS": MOVE_COUNTERS, "OPENED_CLAIM": OPENED_CLAIM,
    "RELEASE_BEGIN": release_scripts.RELEASE_BEGIN, "RELEASE_STAGE": release_scripts.RELEASE_STAGE,
    "RELEASE_COMMIT": release_scripts.RELEASE_COMMIT, "RELEASE_ABORT": release_scripts.RELEASE_ABORT,
    "RELEASE_STEP": release_scripts.release_step(_NEXT_ID + _GROUP_DONE + _KEYS_DONE),
    "KEYS_HELD": KEYS_HELD, "KEYS_FREE": KEYS_FREE, "HANDOFF": HANDOFF, "HANDOFF_DEL": HANDOFF_DEL,
    "INGEST_TOKEN": INGEST_TOKEN, "ISSUE_QUOTA": ISSUE_QUOTA,
}


class Scripts:
    """Every script of ``SOURCES`` registered on one Redis client (``client.register_script``:
    EVALSHA, loading the script on ``NOSCRIPT``), called by name:
    ``scripts.of(r).call("COMMIT", keys=[…], args=[…])``. The only place that registers or
    evaluates Lua; one per client (``of``), so a script is hashed once per client."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._by_name = {name: client.register_script(src) for name, src in SOURCES.items()}

    def call(self, name: str, keys: Sequence[Any], args: Sequence[Any] = ()) -> Any:
        """Run script ``name`` with ``keys`` (KEYS) and ``args`` (ARGV); ``KeyError`` for an
        unknown name."""
        return self._by_name[name](keys=list(keys), args=list(args))

    def call_many(self, name: str, calls: Sequence[tuple[Sequence[Any], Sequence[Any]]]) -> list[Any]:
        """Run script ``name`` once per (keys, args) of ``calls``, in order, and return each
        result: one round trip (a non-transactional pipeline: each call is atomic on its own, as
        with ``call``) on a single Redis, one call after another on a cluster."""
        script = self._by_name[name]
        if len(calls) < 2 or isinstance(self._client, RedisCluster):
            return [script(keys=list(k), args=list(a)) for k, a in calls]
        # plain EVALSHA in the pipeline (redis-py's pipelined scripts send SCRIPT EXISTS, which the
        # services' ACL users may not run, ``store.acl``); a call the server does not know the
        # script for ran nothing and is made again alone (``call`` loads the script)
        pipe = self._client.pipeline(transaction=False)
        for k, a in calls:
            pipe.evalsha(script.sha, len(k), *k, *a)
        out = list(pipe.execute(raise_on_error=False))
        for i, res in enumerate(out):
            if isinstance(res, NoScriptError):
                out[i] = script(keys=list(calls[i][0]), args=list(calls[i][1]))
            elif isinstance(res, Exception):
                raise res
        return out


_registries: weakref.WeakKeyDictionary[Any, Scripts] = weakref.WeakKeyDictionary()
_registries_lock = threading.Lock()


def of(client: Any) -> Scripts:
    """The ``Scripts`` of ``client`` (a ``redis.Redis`` or ``RedisCluster``), made on first use."""
    with _registries_lock:
        found = _registries.get(client)
        if found is None:
            found = _registries[client] = Scripts(client)
        return found
