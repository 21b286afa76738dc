# Shared helpers for scripts/demo and scripts/test: install pinned tools only when missing.
# Sourced, not run. Every install is idempotent and cached in ~/.cargo/bin.

VICEROY_VERSION=0.22.0
NEXTEST_VERSION=0.9.100
CARGO_FUZZ_VERSION=0.13.2
ENVOY_VERSION=1.40.0
BINARYEN_VERSION=108
WIZER_VERSION=10.0.0

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Where cargo puts its output: CARGO_TARGET_DIR when set (relative to $ROOT, where the
# scripts run cargo), else target/.
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
[[ "$TARGET_DIR" == /* ]] || TARGET_DIR="$ROOT/$TARGET_DIR"
export PATH="$HOME/.cargo/bin:$PATH"

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

# The toolchain and wasm targets come from rust-toolchain.toml; rustup installs them on
# first use. Adding targets explicitly covers rustup versions that do not.
ensure_targets() {
  if ! command -v rustup >/dev/null; then
    echo "rustup is required (https://rustup.rs); install it and re-run" >&2
    exit 2
  fi
  local toolchain
  toolchain=$(sed -n 's/^channel *= *"\(.*\)"/\1/p' "$ROOT/rust-toolchain.toml")
  if ! rustup toolchain list | grep -q "^$toolchain"; then
    say "installing Rust $toolchain"
    rustup toolchain install "$toolchain" --profile minimal -c rustfmt -c clippy
  fi
  local installed
  installed=$(rustup target list --installed --toolchain "$toolchain")
  for t in wasm32-wasip1 wasm32-unknown-unknown; do
    if ! grep -qx "$t" <<<"$installed"; then
      say "adding target $t"
      rustup target add "$t" --toolchain "$toolchain"
    fi
  done
  for c in rustfmt clippy; do
    if ! rustup component list --installed --toolchain "$toolchain" | grep -q "^$c"; then
      rustup component add "$c" --toolchain "$toolchain"
    fi
  done
}

# cargo install builds from source (~8 minutes each on 2 cores); skip when the pinned
# version is already in ~/.cargo/bin.
ensure_viceroy() {
  if viceroy --version 2>/dev/null | grep -q " $VICEROY_VERSION\$"; then return; fi
  say "installing viceroy $VICEROY_VERSION (cold build: ~8 minutes)"
  cargo install viceroy --version "$VICEROY_VERSION" --locked
}

# Wizer (Bytecode Alliance), the build-time pre-initializer of the edge app: runs its
# `wizer.initialize` export (the built-in configuration's policy) and writes the memory
# image into the wasm (docs/edge.md, "Reusable sandboxes"). ~8 minutes cold.
ensure_wizer() {
  if wizer --version 2>/dev/null | grep -q " $WIZER_VERSION\$"; then return; fi
  say "installing wizer $WIZER_VERSION (cold build: ~8 minutes)"
  cargo install wizer --version "$WIZER_VERSION" --locked --features "env_logger structopt" >&2
}

ensure_nextest() {
  if cargo nextest --version 2>/dev/null | grep -q "cargo-nextest $NEXTEST_VERSION"; then return; fi
  say "installing cargo-nextest $NEXTEST_VERSION (cold build: ~8 minutes)"
  cargo install cargo-nextest --version "$NEXTEST_VERSION" --locked
}

# wasm-opt (binaryen, Debian package, pinned major version): the release wasm is run through
# `wasm-opt -O3` (docs/performance.md: 11-13% smaller, no slower), the Envoy filter through
# `-Oz` (docs/performance.md, "Size"). Installed with apt-get only when missing.
ensure_wasm_opt() {
  if wasm-opt --version 2>/dev/null | grep -q "version $BINARYEN_VERSION\b"; then return; fi
  local sudo=""
  [[ "$(id -u)" != 0 ]] && sudo="sudo"
  if ! command -v apt-get >/dev/null || { [[ -n "$sudo" ]] && ! command -v sudo >/dev/null; }; then
    echo "wasm-opt $BINARYEN_VERSION is required and could not be installed here (no apt-get," \
      "or neither root nor sudo): install binaryen $BINARYEN_VERSION, e.g." \
      "apt-get install binaryen=$BINARYEN_VERSION-*" >&2
    return 1
  fi
  say "installing binaryen $BINARYEN_VERSION (wasm-opt; Debian package)"
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "binaryen=$BINARYEN_VERSION-*" >&2
}

# Optimizes a cargo-built wasm into NAME.opt.wasm next to it with wasm-opt LEVEL (default -O3)
# and any further wasm-opt FLAGS given after it (redone only when cargo wrote a newer one);
# prints the optimized path.
optimize_wasm() {
  local wasm=$1 level=${2:--O3} out=${1%.wasm}.opt.wasm
  local extra=("${@:3}")
  ensure_wasm_opt
  if [[ ! -f "$out" || "$wasm" -nt "$out" ]]; then
    say "wasm-opt $level ${extra[*]} $(basename "$wasm")"
    wasm-opt "$level" "${extra[@]}" --enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext \
      --enable-mutable-globals "$wasm" -o "$out.tmp" >&2
    mv "$out.tmp" "$out"
  fi
  echo "$out"
}

# Builds the edge app for Fastly Compute and prints the path of the wasm that ships
# (scripts/package, `fastly compute build`, the tests): cargo's release build,
# pre-initialized by Wizer (the built-in configuration's policy built into the memory
# image; no imports may be called, so none are given) into cachet-edge.init.wasm, then
# `wasm-opt -O3` into cachet-edge.init.opt.wasm.
build_edge() {
  local dir="$TARGET_DIR/wasm32-wasip1/release"
  say "building the edge app (wasm32-wasip1, release)"
  cargo build -p cachet-edge --release --target wasm32-wasip1 >&2
  ensure_wizer
  if [[ ! -f "$dir/cachet-edge.init.wasm" || "$dir/cachet-edge.wasm" -nt "$dir/cachet-edge.init.wasm" ]]; then
    say "wizer: pre-initializing cachet-edge.wasm"
    wizer "$dir/cachet-edge.wasm" -o "$dir/cachet-edge.init.wasm.tmp" >&2
    mv "$dir/cachet-edge.init.wasm.tmp" "$dir/cachet-edge.init.wasm"
  fi
  optimize_wasm "$dir/cachet-edge.init.wasm"
}

# The Fastly CLI (npm @fastly/cli, pinned) in $ROOT/.tools: `compute build`, `compute pack`,
# `compute validate` and `compute serve --viceroy-path` work offline; `publish` needs a
# token and network. Installed only when the pinned version is missing; prints its path.
FASTLY_CLI_VERSION=16.1.0
ensure_fastly_cli() {
  local dir="$ROOT/.tools/fastly-cli" bin
  bin="$dir/node_modules/.bin/fastly"
  if [[ -x "$bin" ]] && "$bin" version 2>/dev/null | grep -q "v$FASTLY_CLI_VERSION"; then
    echo "$bin"
    return
  fi
  if ! command -v npm >/dev/null; then
    echo "npm is required to install the Fastly CLI (@fastly/cli)" >&2
    return 1
  fi
  say "installing @fastly/cli $FASTLY_CLI_VERSION into $dir"
  mkdir -p "$dir"
  (cd "$dir" && npm install --silent --no-fund --no-audit --no-save \
    "@fastly/cli@$FASTLY_CLI_VERSION" >&2)
  echo "$bin"
}

# One Debian package, installed only when its command is missing (not pinned: Debian's
# stable release fixes the version). Usage: ensure_debian_package COMMAND PACKAGE WHY.
ensure_debian_package() {
  local cmd=$1 pkg=$2 why=$3
  if command -v "$cmd" >/dev/null; then return; fi
  say "installing $pkg (Debian package, $why)"
  local sudo=""
  [[ "$(id -u)" != 0 ]] && sudo="sudo"
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$pkg" >/dev/null
}

# Varnish 7.1: the oracle of scripts/varnish-diff (ban semantics).
ensure_varnish() {
  ensure_debian_package varnishadm varnish "the ban oracle"
  ensure_debian_package varnishd varnish "the ban oracle"
}

# Chromium (headless): crates/cli/tests/simulate.rs renders the HTML report of
# `cachet simulate` with `chromium --headless --dump-dom` and compares its numbers with the
# JSON report (tested with 156.0.8078.79, bookworm).
ensure_chromium() { ensure_debian_package chromium chromium "for the HTML report test"; }

# tmux: the terminal `cachet stat`'s live-view test drives (crates/cli/tests/stat_tmux.rs:
# detached session, capture-pane).
ensure_tmux() { ensure_debian_package tmux tmux "for the live-view test"; }

# etcd (Debian's etcd-server, 3.4): the fleet's ban log (docs/fleet.md). Prints its path,
# which scripts/test passes to the tests as CACHET_ETCD.
ensure_etcd() {
  ensure_debian_package etcd etcd-server "the fleet ban log" >&2
  command -v etcd
}

# cargo-fuzz (pinned) and a nightly toolchain for the fuzz targets in fuzz/
# (docs/fuzzing.md): libFuzzer's instrumentation needs `cargo +nightly fuzz ...`. Each is
# installed only when missing (cargo-fuzz: ~2 minutes from source on 2 cores).
ensure_cargo_fuzz() {
  if ! rustup toolchain list | grep -q '^nightly'; then
    say "installing the nightly toolchain (for cargo fuzz)"
    if ! rustup toolchain install nightly --profile minimal; then
      echo "cargo fuzz needs a nightly toolchain and rustup could not install one" >&2
      return 2
    fi
  fi
  if cargo fuzz --version 2>/dev/null | grep -q "cargo-fuzz $CARGO_FUZZ_VERSION\$"; then return; fi
  say "installing cargo-fuzz $CARGO_FUZZ_VERSION (cold build: ~2 minutes)"
  cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked
}

# Builds the fuzz targets (no sanitizer: every Cachet crate forbids `unsafe`, and a cold
# build took 4m47s-6m52s without ASan, 9m22s with it, on a loaded VM) and runs each for
# `$1` seconds (default 15) from its committed seeds, the given targets or all of them.
# Prints one summary line per target (libFuzzer's executions, `cov:` edges, `ft:`
# features, corpus size); returns non-zero when a target fails.
fuzz_run() {
  local seconds=${1:-15}
  shift || true
  ensure_cargo_fuzz
  local dir="$ROOT/fuzz" started=$SECONDS
  say "building the fuzz targets (cargo +nightly fuzz build, no sanitizer)"
  (cd "$dir" && cargo +nightly fuzz build --sanitizer none >&2)
  say "fuzz targets built in $(( SECONDS - started )) s"
  local targets=("$@")
  if (( ${#targets[@]} == 0 )); then
    mapfile -t targets < <(cd "$dir" && cargo +nightly fuzz list)
  fi
  local t log failed=() summary=()
  for t in "${targets[@]}"; do
    mkdir -p "$dir/corpus-run/$t" "$dir/artifacts/$t"
    log="$dir/artifacts/$t/last-run.log"
    say "fuzz $t for ${seconds}s"
    if (cd "$dir" && cargo +nightly fuzz run --sanitizer none "$t" \
          "corpus-run/$t" "corpus/$t" -- \
          -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
          >"$log" 2>&1); then
      summary+=("$(printf '%-18s %s' "$t" "$(fuzz_figures "$log")")")
    else
      tail -n 40 "$log" >&2
      summary+=("$(printf '%-18s FAILED (%s)' "$t" "$log")")
      failed+=("$t")
    fi
  done
  say "fuzz summary (${seconds}s per target; executions, cov: edges, ft: features, corpus)"
  printf '%s\n' "${summary[@]}" >&2
  if (( ${#failed[@]} > 0 )); then
    echo "fuzz targets failed: ${failed[*]} (inputs in fuzz/artifacts/<target>/)" >&2
    return 1
  fi
}

# The figures of a libFuzzer log: executions, cov, ft and corpus from its final lines.
fuzz_figures() {
  local done_line execs
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$1" | tail -n 1 || true)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$1" | tail -n 1)
  printf 'execs %-10s %s' "${execs:-?}" \
    "$(sed -E 's/^#[0-9]+[[:space:]]+DONE[[:space:]]+//; s/[[:space:]]+lim:.*//' <<<"$done_line")"
}
