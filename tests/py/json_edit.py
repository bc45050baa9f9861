"""json_edit.py IN OUT EDIT...: writes OUT as the JSON object of IN ('-': an empty object) with each EDIT applied
in order: KEY=JSON sets KEY to the JSON value, -KEY removes KEY (if present). KEY may be a dotted path into
nested objects (a.b.c). IN and OUT may be the same file."""
import json
import sys


def parent(obj, path):
    *parents, last = path.split(".")
    for p in parents:
        obj = obj[p]
    return obj, last


src, out, edits = sys.argv[1], sys.argv[2], sys.argv[3:]
j = {} if src == "-" else json.load(open(src))
for e in edits:
    if e.startswith("-"):
        o, k = parent(j, e[1:])
        o.pop(k, None)
    else:
        key, value = e.split("=", 1)
        o, k = parent(j, key)
        o[k] = json.loads(value)
json.dump(j, open(out, "w"), indent=1)
