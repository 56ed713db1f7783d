#!/usr/bin/env python3
"""Checks benches/search-queries-users.json against the catalogs in tests/corpus/ and
tests/corpus-search/: it parses, every labelled tool exists (server__tool, server = file stem),
no tool is the label of more than 3 queries, every catalog with more than 2 tools has at least 3
queries and appears in both halves. Prints per-catalog counts for each half and the queries that
share no word with the name of any tool they label. Runs no search. Exit 1 on a failed check."""
import collections, glob, json, os, re, sys

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..')
catalogs = {}
descriptions = {}
for f in sorted(glob.glob(os.path.join(root, 'tests/corpus/*.json')) + glob.glob(os.path.join(root, 'tests/corpus-search/*.json'))):
    server = os.path.splitext(os.path.basename(f))[0]
    assert server not in catalogs, f'two catalogs named {server}'
    tools = json.load(open(f))['tools']
    catalogs[server] = [t['name'] for t in tools]
    for t in tools:
        descriptions[f'{server}__{t["name"]}'] = t.get('description') or ''
names = {f'{s}__{t}' for s, ts in catalogs.items() for t in ts}
doc = json.load(open(os.path.join(root, 'benches/search-queries-users.json')))
errors = []
per_tool = collections.Counter()
per_half = {}
seen = set()
for half in ('tuning', 'held_out'):
    per_half[half] = collections.Counter()
    for q in doc[half]:
        if q['query'] in seen: errors.append(f'duplicate query {q["query"]!r}')
        seen.add(q['query'])
        if not q['tools']: errors.append(f'no tools for {q["query"]!r}')
        for t in q['tools']:
            if t not in names: errors.append(f'unknown tool {t} in {q["query"]!r}')
            per_tool[t] += 1
        for s in sorted({t.split('__', 1)[0] for t in q['tools']}):
            per_half[half][s] += 1

STOP = set('the and for you your with this that from into what whats which who how are is was can any all '
           'out get its not has have had will use used using one them they their there then than when where '
           'show tell give make put let now just some more about also only may must should would could does '
           'doe did been being other each over under our ours mine '.split())
def words(s):
    out = set()
    for w in re.split(r'[^a-z0-9]+', s.lower()):
        if len(w) >= 3 and w not in STOP and w != 'api':
            out.add(w); out.add(w.rstrip('s')); out.add(w[:5])
    return out
pure = []
strict = []
for half in ('tuning', 'held_out'):
    for q in doc[half]:
        qw = words(q['query'])
        if all(not (qw & words(t.split('__', 1)[1].replace('-', '_').replace('_', ' '))) for t in q['tools']):
            pure.append((half, q['query'], q['tools']))
        # stricter: no content word shared with the tool's name, its server's name or its description
        if all(not (qw & (words(t.replace('-', '_').replace('_', ' ')) | words(descriptions[t]))) for t in q['tools']):
            strict.append((half, q['query'], q['tools']))

print(f'{"catalog":22} {"tools":>5} {"tuning":>7} {"held_out":>8} {"total":>6}')
for s, ts in catalogs.items():
    a, b = per_half['tuning'][s], per_half['held_out'][s]
    print(f'{s:22} {len(ts):5} {a:7} {b:8} {a + b:6}')
    if len(ts) > 2 and a + b < 3: errors.append(f'{s}: {a + b} queries, fewer than 3')
    if a == 0 or b == 0: errors.append(f'{s}: missing from a half')
nt, nh = len(doc['tuning']), len(doc['held_out'])
print(f'{"all":22} {len(names):5} {nt:7} {nh:8} {nt + nh:6}   (a query naming tools of two servers counts for each)')
for t, n in per_tool.items():
    if n > 3: errors.append(f'{t} labels {n} queries (more than 3)')
covered = len(per_tool)
print(f'\ntools labelled at least once: {covered} of {len(names)}')
print(f'\n{len(pure)} queries share no word with the names of the tools they label '
      f'({sum(h == "tuning" for h, _, _ in pure)} tuning, {sum(h == "held_out" for h, _, _ in pure)} held_out).')
print(f'{len(strict)} of them share no content word with the tool name, server name or description either '
      f'(pure meaning; {sum(h == "tuning" for h, _, _ in strict)} tuning, {sum(h == "held_out" for h, _, _ in strict)} held_out):')
for half, q, ts in strict:
    print(f'  [{half}] {q!r} -> {", ".join(ts)}')
if '-v' in sys.argv[1:]:
    print('\nall queries with no word of the tool name:')
    for half, q, ts in pure:
        print(f'  [{half}] {q!r} -> {", ".join(ts)}')
if errors:
    print('\nFAILED:'); [print('  ' + e) for e in errors]; sys.exit(1)
print('\nok')
