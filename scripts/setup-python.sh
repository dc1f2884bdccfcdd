#!/usr/bin/env bash
# Create (or refresh) the Python environment for dlscale's worker library and example trainer.
#
#   scripts/setup-python.sh            # venv at ${DLSCALE_VENV:-$HOME/.cache/dlscale/venv}
#   DLSCALE_VENV=/some/dir scripts/setup-python.sh
#
# Idempotent: an existing venv that already has torch, scikit-learn, pytest, Lightning, transformers,
# accelerate, Ray (Train, and the dashboard whose Jobs API dlscale's Ray executor drives) and an
# editable dlscale pointing at this checkout is left alone (second run ~1-2 s).
# The first run downloads torch from PyPI (the default build is the CUDA one, ~540 MB download,
# ~5 GB installed, ~3 min here; it runs fine on CPU with gloo); Ray adds ~700 MB (~40 s).
# Env knobs: PYTHON (interpreter used to create the venv, default python3),
#            DLSCALE_TORCH_SPEC (pip requirement for torch, default "torch").
# The last line printed on stdout is the venv path.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${DLSCALE_VENV:-$HOME/.cache/dlscale/venv}"
python="${PYTHON:-python3}"
torch_spec="${DLSCALE_TORCH_SPEC:-torch}"

log() { echo "setup-python: $*" >&2; }

if [ ! -x "$venv/bin/python" ]; then
  log "creating venv at $venv with $("$python" --version 2>&1)"
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv"
fi
vpy="$venv/bin/python"

# Third-party dependencies: install only what is missing. Checked via package metadata, not by
# importing (importing torch alone takes seconds). A requirement with extras is checked by its
# package and one distribution each extra brings (ray[train] by pyarrow, ray[default] by
# aiohttp), and asked for once.
missing=()
while read -r dist spec; do
  if ! "$vpy" -c "import importlib.metadata as m, sys; m.version(sys.argv[1])" "$dist" 2>/dev/null; then
    case " ${missing[*]-} " in *" $spec "*) ;; *) missing+=("$spec") ;; esac
  fi
done <<DEPS
torch $torch_spec
scikit-learn scikit-learn
pytest pytest
lightning lightning>=2.6,<3
transformers transformers>=5,<6
accelerate accelerate>=1.0
ray ray[default,train]>=2.60,<3
pyarrow ray[default,train]>=2.60,<3
aiohttp ray[default,train]>=2.60,<3
DEPS
if [ "${#missing[@]}" -gt 0 ]; then
  log "installing: ${missing[*]} (torch takes a few minutes the first time)"
  "$vpy" -m pip install --quiet --upgrade pip
  "$vpy" -m pip install --quiet "${missing[@]}"
else
  log "torch, scikit-learn, pytest, lightning, transformers, accelerate, ray already installed"
fi

# Our library, editable, pointing at this checkout (re-done if the venv points at another checkout).
have="$("$vpy" - <<'PY' 2>/dev/null || true
import importlib.util, os
spec = importlib.util.find_spec("dlscale")
print(os.path.dirname(os.path.realpath(spec.origin)) if spec and spec.origin else "")
PY
)"
if [ "$have" != "$(realpath "$repo/python/src/dlscale")" ]; then
  log "installing dlscale (editable) from $repo/python"
  "$vpy" -m pip install --quiet --no-deps -e "$repo/python"
else
  log "dlscale already installed (editable, $have)"
fi

"$vpy" - >&2 <<'PY'
import importlib.metadata as m
print("setup-python: " + ", ".join(f"{d} {m.version(d)}" for d in ("torch", "scikit-learn", "pytest", "lightning", "transformers", "accelerate", "ray", "dlscale")))
PY
echo "$venv"
