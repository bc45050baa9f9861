"""opencl_accept_compile.py REPORT.json ACCEPT_DIR: accept with an opencl candidate is ACCEPTED, records the
candidate's compilation (compile stats and a compilation phase; none for the cpu-ref baseline), and its later
opencl runs (recovery, portability) found every program in the cache."""
import json, sys
r = json.load(open(sys.argv[1]))
c = r["candidate"].get("compile", {})
print("accept: verdict", r["verdict"], "candidate compile", c, "baseline compile", r["baseline"].get("compile"))
ok = r["verdict"] == "ACCEPTED" and "compile" not in r["baseline"]
ok &= all(k in c for k in ("compile_s", "cache_hits", "cache_misses", "recompilations")) and c["compile_s"] > 0
ok &= c.get("cache_misses", 0) >= 2 and c.get("cache_hits", 1) == 0
comp = [p for p in r["phases"] if p["phase"] == "compilation"]
print("  compilation phases:", [(p["run"], round(p["seconds"], 3)) for p in comp])
ok &= any(p["run"] == "candidate" and p["seconds"] > 0 for p in comp) and not any(p["run"] == "baseline" for p in comp)
# the later opencl runs (recovery, portability) found every program in the cache
for d in ("recovery", "portability/candidate_from_baseline/run"):
    m = json.load(open(f"{sys.argv[2]}/{d}/manifest.json"))["platform"]["compile"]
    print(f"  {d}: {m}")
    ok &= m["cache_hits"] >= 2 and m["cache_misses"] == 0
sys.exit(0 if ok else 1)
