"""What must keep working under the sandbox: the SDK in all its import styles, gather, MCP over
stdio, stdlib imports that touch files, and files in the scratch dir. Prints one line per item;
the harness compares the whole output."""

import datetime
import re
import sqlite3
import tempfile
import zoneinfo

# The SDK, every way a model writes it.
a = await echo(text="a")
from tools import echo as echo2

b = await echo2(text="b")
import tools

c = await tools.echo(text="c")
d = await call_tool("echo", text="d")
print("sdk", a["text"], b["text"], c["text"], d["text"])

out = await asyncio.gather(*[echo(text=str(i)) for i in range(50)])
print("gather", sum(int(r["text"]) for r in out))
print("mcp", await demo__add(a=2, b=3))

print("json", json.dumps({"k": [1, 2]}, sort_keys=True))
print("re", re.sub(r"\d+", "#", "a1b22"))
paris = datetime.datetime(2024, 7, 1, 12, tzinfo=zoneinfo.ZoneInfo("Europe/Paris"))
print("zoneinfo", paris.utcoffset())

db = sqlite3.connect("scratch.db")
db.execute("create table t (x)")
db.executemany("insert into t values (?)", [(1,), (2,), (3,)])
db.commit()
print("sqlite3", db.execute("select sum(x) from t").fetchone()[0])
db.close()

with tempfile.NamedTemporaryFile("w+", suffix=".txt") as f:
    f.write("temp")
    f.flush()
    f.seek(0)
    print("tempfile", f.read(), f.name.startswith(_os.getcwd()))

with open("notes.txt", "w") as f:
    f.write("kept in scratch")
_os.makedirs("sub/dir", exist_ok=True)
with open("sub/dir/x.json", "w") as f:
    json.dump({"ok": True}, f)
print("scratch", open("notes.txt").read(), json.load(open("sub/dir/x.json")), sorted(_os.listdir(".")))
