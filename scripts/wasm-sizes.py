#!/usr/bin/env python3
"""Attributes a wasm's code to functions and crates: reads the `name` section (keep it with
wasm-opt -g) and the code-section body sizes. Usage: wasm-sizes.py FILE [TOP]"""
import sys, subprocess, re, collections
def leb(b, i):
    r = s = 0
    while True:
        x = b[i]; i += 1; r |= (x & 0x7f) << s; s += 7
        if x < 0x80: return r, i
data = open(sys.argv[1], 'rb').read(); top = int(sys.argv[2]) if len(sys.argv) > 2 else 20
i = 8; nimports = 0; bodies = []; names = {}; sections = collections.Counter()
while i < len(data):
    sid = data[i]; i += 1; size, i = leb(data, i); end = i + size
    if sid == 0:
        nl, j = leb(data, i); nm = data[j:j+nl].decode(); j += nl
        sections['custom:' + nm] += size
        if nm == 'name':
            while j < end:
                sub = data[j]; j += 1; ss, j = leb(data, j); se = j + ss
                if sub == 1:
                    n, j = leb(data, j)
                    for _ in range(n):
                        idx, j = leb(data, j); l, j = leb(data, j); names[idx] = data[j:j+l].decode('utf8', 'replace'); j += l
                j = se
    else:
        sections[{1:'type',2:'import',3:'function',4:'table',5:'memory',6:'global',7:'export',8:'start',9:'elem',10:'code',11:'data',12:'datacount'}.get(sid, str(sid))] += size
        if sid == 2:
            n, j = leb(data, i)
            for _ in range(n):
                l, j = leb(data, j); j += l; l, j = leb(data, j); j += l; k = data[j]; j += 1
                if k == 0: _, j = leb(data, j); nimports += 1
                elif k == 1: j += 1; fl, j = leb(data, j); _, j = leb(data, j); j = leb(data, j)[1] if fl & 1 else j
                elif k == 2: fl, j = leb(data, j); _, j = leb(data, j); j = leb(data, j)[1] if fl & 1 else j
                elif k == 3: j += 2
        if sid == 10:
            n, j = leb(data, i)
            for k in range(n):
                s, j2 = leb(data, j); bodies.append((nimports + k, s + (j2 - j))); j = j2 + s
    i = end
mangled = [names.get(idx, f'func{idx}') for idx, _ in bodies]
dem = [re.sub(r'\[[0-9a-f]{16}\]', '', x) for x in subprocess.run(['c++filt'], input='\n'.join(mangled), capture_output=True, text=True).stdout.split('\n')]
def crate(n):
    if 'externref shim' in n or 'multivalue shim' in n: return 'wasm-bindgen-glue'
    if n.startswith('<char>') or n.startswith('<str>') or n.startswith('<[') or n.startswith('<u') or n.startswith('<i'): return 'core'
    n2 = n.lstrip('<&*')
    if n2.startswith('mut '): n2 = n2[4:]
    if n2.startswith('dyn '): n2 = n2[4:]
    m = re.match(r'([A-Za-z_][A-Za-z0-9_]*)::', n2)
    if m: return m.group(1)
    if n.startswith('__wbg') or n.startswith('__wbindgen') or n.startswith('__externref'): return 'wasm-bindgen-glue'
    if re.match(r'(malloc|free|dlmalloc|memcpy|memset|memmove|memcmp)', n): return 'libc/dlmalloc'
    return '(other: ' + n[:30] + ')' if not n.startswith('func') else '(unnamed)'
print('sections:', dict(sections))
rows = sorted(((s, dem[k] if k < len(dem) else mangled[k]) for k, (_, s) in enumerate(bodies)), reverse=True)
print(f'code: {sum(s for s, _ in rows)} bytes in {len(rows)} functions')
print(f'\n top {top} functions')
for s, n in rows[:top]: print(f'{s:7d}  [{crate(n)}] {n[:150]}')
g = collections.Counter(); c = collections.Counter()
for s, n in rows: g[crate(n)] += s; c[crate(n)] += 1
print('\n by crate')
for k, v in g.most_common(25): print(f'{v:7d} {c[k]:4d}  {k}')
