#!/bin/sh
# bench_deps.sh - `make bench-deps`: installs llama-cpp-python (llama.cpp
# through its Python binding, the rival of bench/compare_llamacpp.sh) from
# its source package. Its default build targets this CPU's instruction set;
# where the CPU reports AMX that build crashes in ggml_backend_amx_mul_mat,
# so there it is built for AVX-512 (VBMI, VNNI, BF16) without the AMX
# kernels. Does nothing when that version is already importable, unless
# BENCH_DEPS_FORCE=1. Either way it then generates a few tokens with the
# default model when that is there (tools/llamacpp_smoke.py). Not used by
# CI or `make test`.
set -e
cd "$(dirname "$0")/.."
VERSION=0.3.36
JOBS=${CMAKE_BUILD_PARALLEL_LEVEL:-2}

# smoke: a build for the wrong instruction set shows on its first model
smoke() {
	m=$(sh assets/fetch_model.sh --path)
	[ -r "$m" ] || return 0
	python3 tools/llamacpp_smoke.py -n 8 -t "$JOBS" "$m" || {
		echo "bench-deps: llama.cpp fails on $m (BENCH_DEPS_FORCE=1 builds it again)" >&2
		exit 1
	}
}

have=$(python3 -c 'import llama_cpp; print(llama_cpp.__version__)' 2>/dev/null || true)
if [ "$have" = "$VERSION" ] && [ "${BENCH_DEPS_FORCE:-0}" = 0 ]; then
	echo "bench-deps: llama-cpp-python $VERSION already installed"
	smoke
	exit 0
fi

# AMX as the kernel reports it, or as the compiler's native target sees it
# (what a native build compiles for)
if grep -q -w -E 'amx_(tile|int8|bf16)' /proc/cpuinfo 2>/dev/null ||
	echo | ${CC:-cc} -march=native -dM -E - 2>/dev/null | grep -q '__AMX_TILE__'; then
	echo "bench-deps: this CPU reports AMX: building llama.cpp for AVX-512 without its AMX kernels"
	CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON ${CMAKE_ARGS:-}"
else
	echo "bench-deps: no AMX on this CPU: building llama.cpp with its defaults (native instruction set)"
	CMAKE_ARGS=${CMAKE_ARGS:-}
fi
export CMAKE_ARGS
export CMAKE_BUILD_PARALLEL_LEVEL="$JOBS"
echo "bench-deps: CMAKE_ARGS=$CMAKE_ARGS, $JOBS build jobs (a source build: tens of minutes on 2 cores)"
# --no-cache-dir: a wheel cached from an earlier build with other
# CMAKE_ARGS would otherwise be installed as it is.
python3 -m pip install --no-cache-dir --force-reinstall --no-deps "llama-cpp-python==$VERSION"
python3 -m pip install "llama-cpp-python==$VERSION"
python3 -c 'import llama_cpp; print("bench-deps: llama-cpp-python", llama_cpp.__version__, "importable")'
smoke
