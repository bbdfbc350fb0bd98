#!/usr/bin/env python3
"""Where a reproduction's training time went: the walls (`wall_s`) that the finished runs
of a run cache recorded, summed per paper and per table, with their counts and the
commits they were trained at. Usage:
    python3 xtask/scripts/run_walls.py docs/full-reproduction
A cache is `<out>/<paper>/runs/<table>/**/<key>.json` (`cargo xtask reproduce --out`).
Partial runs (`*.partial.json`) are left out; pretraining records (`pretrained-*.json`,
the LM fine-tuning table's public pretraining, its sweep's included) are summed apart.
A run's wall counts every second it ran, including any time its process was stopped and
the load of whatever shared the machine, so the sums give shares, not a quiet-machine
figure; with several workers they are worker-seconds, not wall-clock."""
import glob, json, os, sys
from collections import defaultdict


def records(out):
    """(paper, table, kind, record) for every finished record of the cache `out`."""
    for path in sorted(glob.glob(os.path.join(out, '*', 'runs', '**', '*.json'), recursive=True)):
        name = os.path.basename(path)
        if name.endswith('.partial.json'):
            continue
        rel = os.path.relpath(path, out).split(os.sep)
        paper, table = rel[0], rel[2]
        kind = 'pretraining' if name.startswith('pretrained-') else 'run'
        with open(path) as f:
            yield paper, table, kind, json.load(f)


def main(out):
    rows = defaultdict(lambda: [0, 0.0, set()])
    for paper, table, kind, record in records(out):
        row = rows[(paper, table, kind)]
        row[0] += 1
        row[1] += record['wall_s']
        row[2].add(record.get('commit', '?'))
    if not rows:
        sys.exit(f'no finished runs under {out}')
    print('| paper | table | kind | records | wall (s) | commits |')
    print('|---|---|---|---|---|---|')
    papers = defaultdict(lambda: [0, 0.0])
    for (paper, table, kind), (n, wall, commits) in sorted(rows.items()):
        print(f'| {paper} | {table} | {kind} | {n} | {wall:,.0f} | {", ".join(sorted(commits))} |')
        papers[(paper, kind)][0] += n
        papers[(paper, kind)][1] += wall
    print()
    print('| paper | kind | records | wall (s) |')
    print('|---|---|---|---|')
    for (paper, kind), (n, wall) in sorted(papers.items(), key=lambda kv: -kv[1][1]):
        print(f'| {paper} | {kind} | {n} | {wall:,.0f} |')
    for kind in ('run', 'pretraining'):
        n = sum(v[0] for k, v in papers.items() if k[1] == kind)
        wall = sum(v[1] for k, v in papers.items() if k[1] == kind)
        print(f'\n{kind}s: {n} records, {wall:,.0f} s')


if __name__ == '__main__':
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
