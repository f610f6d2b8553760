#!/usr/bin/env bash
# Run every GPU-capable reproducer on a CUDA machine with vLLM installed and collect all verdicts
# in one folder. Usage: repro/gpu-check.sh [OUT_DIR] [PER_SCENARIO_TIMEOUT_S]
# Needs: `pip install 'vcrash[repro]'` (vLLM with CUDA) in the Python on PATH. Nothing is
# downloaded: the tiny model is built locally. Takes a few minutes.
set -u
out="${1:-gpu-verdicts}"
per="${2:-300}"
mkdir -p "$out"
python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null \
  || { echo "gpu-check: no CUDA device visible to torch (or torch not installed)" >&2; exit 2; }
rules=$(vcrash repro list --json | python3 -c '
import json, sys
doc = json.load(sys.stdin)
rows = doc if isinstance(doc, list) else doc.get("scenarios", [])
print(" ".join(r["rule"] for r in rows if "GPU" in (r.get("needs") or "")))')
status=0
for rule in $rules; do
  echo "== $rule" >&2
  timeout $((per + 60)) vcrash repro run "$rule" --device cuda --out "$out/$rule" --timeout "$per"
  rc=$?
  [ "$rc" -eq 0 ] || status=1
done
python3 - "$out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
rows = []
for verdict in sorted(out.glob("*/verdict.json")):
    v = json.loads(verdict.read_text())
    rows.append({k: v.get(k) for k in ("rule", "vllm_version", "device", "verdict", "rediagnosed_as", "duration_s")})
(out / "summary.json").write_text(json.dumps(rows, indent=2) + "\n")
for r in rows:
    print(f"{r['rule']:45} {r['verdict']:15} vLLM {r['vllm_version']} on {r['device']} ({r['duration_s']} s)")
PY
exit $status
