# An exec_code script against the demo MCP server (examples/mcp.json):
#   cargo install --locked --path . && PTC_MCP_CONFIG=examples/mcp.json ptc-sidecar exec examples/demo.py
# Three lookups at once, arithmetic on the results, a tool error caught: only the prints return.
countries = await asyncio.gather(*[demo__lookup_country(code=c) for c in ["FR", "JP", "BR"]])
for c in countries:
    print(f"{c['name']}: capital {c['capital']}, population {c['population']:,}")
summary = await demo__stats(numbers=[c["population"] for c in countries])
print(f"mean population {summary['mean']:,.0f}")
try:
    await demo__fail(message="this tool always fails")
except ToolError as e:
    print("caught:", e)
