"""Lua of the shuffler's releases too large for one bounded script call (``ldptel.shuffler.release``)
and of its discards, registered in ``scripts.SOURCES`` and called only through
``scripts.of(client).call``.

A Redis script blocks every client while it runs, and one ``SHUFFLE`` of 70,000 ingress entries
took 0.5-1 s. So a release of more than a few thousand entries is journaled and moved in bounded
steps, one stream at a time (``keys.release_key``: one release in progress per ingress stream):

1. ``RELEASE_BEGIN`` opens the stream's journal (refused while another release holds it);
2. ``RELEASE_STAGE`` calls stage the re-packed batches (``keys.release_batches_key``) and the
   ingress ids (``keys.release_ids_key``), each call checking that its ids still exist in ingress;
   while staging, the journal and the staged keys expire after a TTL renewed by every call, and
   ``RELEASE_ABORT`` drops them: ingress was not touched;
3. ``RELEASE_COMMIT`` checks that everything was staged and marks the journal committed (no TTL
   any more): from then on the release is completed by whoever steps it — this shuffler, or any
   other after it died;
4. ``RELEASE_STEP`` calls move a bounded number of staged batches to the analysis stream (ids
   from ``next_id``: consecutive, as one ``SHUFFLE`` gives them), then delete a bounded number of
   the ingress ids, each step recording its progress in the same atomic call, and the last one
   bumps the counters and deletes the journal.

Exactly once: no ingress entry is deleted before the commit, and ``SHUFFLE``, ``DISCARD`` and
``RELEASE_BEGIN`` refuse while a journal exists, so the entries a staging release checked are
still there when it commits; after the commit each step is atomic and idempotent (its progress is
in the journal), so every staged batch reaches the analysis stream once and every ingress id is
deleted once, whoever runs the steps and whenever a process dies.
"""

from __future__ import annotations


def discard(keys_done: str) -> str:
    """The shuffler discards the ingress entries of a sealed group (privacy_mode shuffled*) whose
    window closed below batch_min (ldptel.shuffler.sealed): they are deleted, never released
    (``keys_done``: ``scripts._KEYS_DONE``).
    KEYS[1] ingress stream (keys.ingress_key), KEYS[2] shuffler counters (keys.shuffle_metrics_key),
         KEYS[3] (optional) the stream's release journal (keys.release_key), KEYS[4] (optional) the
         ingress groups hash (keys.ingress_groups_key), KEYS[5] (optional) the stream's
         analyzer-key hash (keys.sealed_keys_key)
    ARGV[1] real reports of the entries, with KEYS[4] ARGV[2] their group (keys.ingress_group,
         lowered by the entries deleted), with KEYS[5] ARGV[3] the entries per analyzer key
         ("<key id hex>=<n>,…", lowered), then the entry ids
    Returns {'ok', n}, {'refused', id} (an entry already gone: nothing written but 'refused'), or
    {'busy'} while a journaled release holds the stream (nothing written)."""
    return keys_done + """
if KEYS[3] and redis.call('EXISTS', KEYS[3]) == 1 then return {'busy'} end
local first = KEYS[5] and 4 or (KEYS[4] and 3 or 2)
local ids = {}
for i = first, #ARGV do
  if #redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i]) == 0 then
    redis.call('HINCRBY', KEYS[2], 'refused', 1)
    return {'refused', ARGV[i]}
  end
  ids[#ids + 1] = ARGV[i]
end
for s = 1, #ids, 1000 do
  redis.call('XDEL', KEYS[1], unpack(ids, s, math.min(s + 999, #ids)))
end
redis.call('HINCRBY', KEYS[2], 'ingress_batches', #ids)
redis.call('HINCRBY', KEYS[2], 'ingress_reports', ARGV[1])
redis.call('HINCRBY', KEYS[2], 'discarded_reports', ARGV[1])
if KEYS[4] and ARGV[2] ~= '' and redis.call('HINCRBY', KEYS[4], ARGV[2], -#ids) <= 0 then
  redis.call('HDEL', KEYS[4], ARGV[2])
end
if KEYS[5] then keys_done(KEYS[5], nil, ARGV[3], '') end
return {'ok', tostring(#ids)}
"""

# Open a release of one ingress stream.
# KEYS[1] journal (keys.release_key), KEYS[2] staged batches (keys.release_batches_key),
#      KEYS[3] staged ingress ids (keys.release_ids_key)
# ARGV[1] release id, ARGV[2] ingress ids, ARGV[3] analysis batches, ARGV[4] ingress reports,
#      ARGV[5] window start (epoch s), ARGV[6] TTL while staging (ms), ARGV[7] (optional) the
#      ingress ids' group (keys.ingress_group: RELEASE_STEP lowers it when the release is done),
#      ARGV[8] (optional) their entries per analyzer key ("<key id hex>=<n>,…": the same)
# Returns {'ok'}, or {'busy', state, id} when a release holds the stream (nothing written).
RELEASE_BEGIN = """
local cur = redis.call('HGET', KEYS[1], 'id')
if cur then return {'busy', redis.call('HGET', KEYS[1], 'state') or '', cur} end
redis.call('UNLINK', KEYS[2], KEYS[3])
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'state', 'staging', 'ids', ARGV[2], 'batches', ARGV[3],
           'reports', ARGV[4], 'window', ARGV[5], 'staged', 0, 'moved', 0, 'moved_reports', 0,
           'group', ARGV[7] or '', 'keys', ARGV[8] or '', 'last', '')
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return {'ok'}
"""

# Stage part of a release: ingress ids (each must still exist) and re-packed batches.
# KEYS[1] journal, KEYS[2] staged batches, KEYS[3] staged ids, KEYS[4] ingress stream
#      (keys.ingress_key), KEYS[5] shuffler counters (keys.shuffle_metrics_key)
# ARGV[1] release id, ARGV[2] TTL while staging (ms), ARGV[3] n_ids, then n_ids ingress ids, then
#      (batch, count) pairs
# Returns {'ok'}, {'gone'} (the journal is not this release's staging one: nothing written), or
# {'refused', id} (an ingress entry is gone: nothing written but the 'refused' counter).
RELEASE_STAGE = """
local j = redis.call('HMGET', KEYS[1], 'id', 'state')
if j[1] ~= ARGV[1] or j[2] ~= 'staging' then return {'gone'} end
local last = 3 + tonumber(ARGV[3])
for i = 4, last do
  if #redis.call('XRANGE', KEYS[4], ARGV[i], ARGV[i]) == 0 then
    redis.call('HINCRBY', KEYS[5], 'refused', 1)
    return {'refused', ARGV[i]}
  end
end
for s = 4, last, 1000 do
  redis.call('RPUSH', KEYS[3], unpack(ARGV, s, math.min(s + 999, last)))
end
local n = tonumber(redis.call('HGET', KEYS[1], 'staged'))
for a = last + 1, #ARGV, 2 do
  n = n + 1
  redis.call('XADD', KEYS[2], '0-' .. n, 'batch', ARGV[a], 'count', ARGV[a + 1])
end
redis.call('HSET', KEYS[1], 'staged', n)
for k = 1, 3 do redis.call('PEXPIRE', KEYS[k], ARGV[2]) end
return {'ok'}
"""

# Commit a fully staged release: from now on it is completed by RELEASE_STEP, never dropped.
# KEYS[1] journal, KEYS[2] staged batches, KEYS[3] staged ids; ARGV[1] release id
# Returns {'ok'}, {'gone'} (not this release's staging journal), {'incomplete'} (sizes differ).
RELEASE_COMMIT = """
local j = redis.call('HMGET', KEYS[1], 'id', 'state', 'ids', 'batches')
if j[1] ~= ARGV[1] or j[2] ~= 'staging' then return {'gone'} end
if redis.call('LLEN', KEYS[3]) ~= tonumber(j[3]) or redis.call('XLEN', KEYS[2]) ~= tonumber(j[4]) then
  return {'incomplete'}
end
redis.call('HSET', KEYS[1], 'state', 'committed')
for k = 1, 3 do redis.call('PERSIST', KEYS[k]) end
return {'ok'}
"""

# Drop a release still staging (ingress untouched). With ARGV[1] = '' whichever release it is, but
# only once no RELEASE_STAGE call renewed its TTL for ARGV[3] ms (its shuffler stopped or died).
# KEYS[1] journal, KEYS[2] staged batches, KEYS[3] staged ids
# ARGV[1] release id or '', ARGV[2] TTL while staging (ms), ARGV[3] idle time (ms)
# Returns {'ok'}, {'committed'} (complete it instead), {'active', id}, or {'gone'} (none, another).
RELEASE_ABORT = """
local j = redis.call('HMGET', KEYS[1], 'id', 'state')
if not j[1] or (ARGV[1] ~= '' and j[1] ~= ARGV[1]) then return {'gone'} end
if j[2] == 'committed' then return {'committed'} end
if ARGV[1] == '' and redis.call('PTTL', KEYS[1]) > tonumber(ARGV[2]) - tonumber(ARGV[3]) then
  return {'active', j[1]}
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return {'ok'}
"""


def release_step(next_id: str) -> str:
    """One bounded step of a committed release (``next_id``: ``scripts._NEXT_ID``,
    ``scripts._GROUP_DONE`` and ``scripts._KEYS_DONE``).
    KEYS[1] journal, KEYS[2] staged batches, KEYS[3] staged ids, KEYS[4] ingress stream,
         KEYS[5] analysis stream (keys.stream_key), KEYS[6] shuffler counters, KEYS[7] (optional)
         the ingress groups hash (keys.ingress_groups_key: the journal's group lowered by its ids
         in the step that ends the release), KEYS[8], KEYS[9] (optional) the stream's
         keys.sealed_keys_key and keys.key_holds_key (the journal's keys lowered in that step, the
         release's last analysis entry id recorded)
    ARGV[1] most batches, ARGV[2] most bytes of batches, ARGV[3] most ingress ids per step
    Returns {'none'} (no release), {'staging', id}, {'moved', n} (batches to the analysis stream),
    {'deleted', n} (ingress ids), or {'done', id}: counters bumped, journal and staged keys gone."""
    return next_id + """
local id = redis.call('HGET', KEYS[1], 'id')
if not id then return {'none'} end
local j = redis.call('HMGET', KEYS[1], 'state', 'window', 'ids', 'reports', 'moved', 'moved_reports')
if j[1] ~= 'committed' then return {'staging', id} end
local staged = redis.call('XRANGE', KEYS[2], '-', '+', 'COUNT', ARGV[1])
if #staged > 0 then
  local ms, seq = next_id(KEYS[5], j[2])
  local reports, bytes, done = 0, 0, {}
  for _, e in ipairs(staged) do
    local f = e[2]
    if #done > 0 and bytes + #f[2] > tonumber(ARGV[2]) then break end
    redis.call('XADD', KEYS[5], string.format('%d-%d', ms, seq), 'batch', f[2], 'window', j[2], 'count', f[4])
    seq, reports, bytes = seq + 1, reports + tonumber(f[4]), bytes + #f[2]
    done[#done + 1] = e[1]
  end
  redis.call('XDEL', KEYS[2], unpack(done))
  redis.call('HSET', KEYS[1], 'last', string.format('%d-%d', ms, seq - 1))
  redis.call('HINCRBY', KEYS[1], 'moved', #done)
  redis.call('HINCRBY', KEYS[1], 'moved_reports', reports)
  return {'moved', tostring(#done)}
end
local ids = redis.call('LRANGE', KEYS[3], 0, tonumber(ARGV[3]) - 1)
if #ids > 0 then
  for s = 1, #ids, 1000 do
    redis.call('XDEL', KEYS[4], unpack(ids, s, math.min(s + 999, #ids)))
  end
  redis.call('LTRIM', KEYS[3], #ids, -1)
  return {'deleted', tostring(#ids)}
end
redis.call('HINCRBY', KEYS[6], 'ingress_batches', j[3])
redis.call('HINCRBY', KEYS[6], 'ingress_reports', j[4])
redis.call('HINCRBY', KEYS[6], 'analysis_batches', j[5])
redis.call('HINCRBY', KEYS[6], 'analysis_reports', j[6])
group_done(KEYS[7], redis.call('HGET', KEYS[1], 'group'), j[3])
local spec, last = redis.call('HGET', KEYS[1], 'keys'), redis.call('HGET', KEYS[1], 'last')
keys_done(KEYS[8], KEYS[9], spec, last)
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return {'done', id}
"""
