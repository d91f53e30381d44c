#!/usr/bin/env python3
"""Where a load's CPU goes, sampled from /proc (Linux; standard library and psql only).

Used for BENCHMARKS.md's "Three replicas against one" (issue 31): run it beside
`e2e/replicas` BenchmarkHTTPClaims or the load program and read one line per interval:
the service processes' CPU (cores) and their threads' wait for a CPU (runq, s per s, from
/proc/<pid>/task/*/schedstat), the CPU of the PostgreSQL backends their sockets connect to
(pg_ours; found through /proc/net/tcp and pg_stat_activity), the rest of PostgreSQL, the
benchmark client, everything else, the machine's busy cores, and the service's backends by
state and wait event.

  scripts/procsample.py [interval-seconds] [service-process-prefix] [client-process-prefix]
  defaults: 2, reconciler, replicas   (for the load program: 1 httpload httpload)
"""
import collections
import os
import subprocess
import sys
import time

INTERVAL = float(sys.argv[1]) if len(sys.argv) > 1 else 2
SERVICE = sys.argv[2] if len(sys.argv) > 2 else 'reconciler'
CLIENT = sys.argv[3] if len(sys.argv) > 3 else 'replicas'
PGPORT = ':%04X' % 5432  # /proc/net/tcp writes ports in hex
HZ = os.sysconf('SC_CLK_TCK')
def procs():
    out = {}
    for pid in os.listdir('/proc'):
        if not pid.isdigit(): continue
        try:
            with open(f'/proc/{pid}/stat') as f: s = f.read()
        except Exception: continue
        comm = s[s.index('(')+1:s.rindex(')')]
        rest = s[s.rindex(')')+2:].split()
        out[int(pid)] = (comm, (int(rest[11]) + int(rest[12])) / HZ)
    return out
def runq(pid):
    t = 0
    try:
        for tid in os.listdir(f'/proc/{pid}/task'):
            with open(f'/proc/{pid}/task/{tid}/schedstat') as f:
                t += int(f.read().split()[1])
    except Exception: pass
    return t / 1e9
def machine():
    with open('/proc/stat') as f: v = list(map(int, f.readline().split()[1:]))
    return sum(v) / HZ, (v[3] + v[4]) / HZ
def pgports(pids):
    inodes = set()
    for p in pids:
        try:
            for fd in os.listdir(f'/proc/{p}/fd'):
                try:
                    l = os.readlink(f'/proc/{p}/fd/{fd}')
                except Exception: continue
                if l.startswith('socket:['): inodes.add(l[8:-1])
        except Exception: pass
    ports = set()
    with open('/proc/net/tcp') as f:
        for line in f.readlines()[1:]:
            c = line.split()
            if c[2].endswith(PGPORT) and c[9] in inodes:
                ports.add(int(c[1].split(':')[1], 16))
    return ports
def backends(ports):
    if not ports: return {}
    q = "select pid, state, coalesce(wait_event_type,'')||':'||coalesce(wait_event,'') from pg_stat_activity where client_port in (%s)" % ','.join(map(str, ports))
    r = subprocess.run(['psql', '-h', '127.0.0.1', '-U', 'postgres', '-d', 'postgres', '-AtF', '|', '-c', q], capture_output=True, text=True)
    out = {}
    for line in r.stdout.splitlines():
        pid, state, wait = line.split('|')
        out[int(pid)] = (state, wait)
    return out
prev = procs(); prq = {}; pm = machine(); pt = time.time()
while True:
    time.sleep(INTERVAL)
    cur = procs(); cm = machine(); ct = time.time(); dt = ct - pt
    rec = [p for p, (c, _) in cur.items() if c.startswith(SERVICE)]
    be = backends(pgports(rec))
    agg = collections.Counter()
    for pid, (comm, cpu) in cur.items():
        if pid in prev and prev[pid][0] == comm:
            d = cpu - prev[pid][1]
            if comm.startswith(SERVICE): agg['rec'] += d
            elif pid in be: agg['pg_ours'] += d
            elif comm == 'postgres': agg['pg_other'] += d
            elif comm.startswith(CLIENT): agg['client'] += d
            else: agg['other'] += d
    crq = {p: runq(p) for p in rec}
    rq = sum(crq[p] - prq.get(p, crq[p]) for p in rec)
    busy = (cm[0] - pm[0]) - (cm[1] - pm[1])
    st = collections.Counter(s if s != 'active' else 'active/' + w for s, w in be.values())
    print(f"{time.strftime('%H:%M:%S', time.gmtime())} n_rec={len(rec)} rec={agg['rec']/dt:.2f} rec_runq={rq/dt:.2f} pg_ours={agg['pg_ours']/dt:.2f} client={agg['client']/dt:.2f} pg_other={agg['pg_other']/dt:.2f} other={agg['other']/dt:.2f} busy={busy/dt:.2f} load={open('/proc/loadavg').read().split()[0]} backends={dict(st)}", flush=True)
    prev, prq, pm, pt = cur, crq, cm, ct
