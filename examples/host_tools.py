"""The host tools of the example agents (examples/anthropic_agent.py, examples/openai_agent.py).

They stand for the tools your runtime owns: in-memory data, no network. The sidecar knows them
from examples/agent-tools.json (no callback URL there), so when the model's code calls one the
call comes back to the runtime on the exec_code event stream, and `call` answers it.
"""

WEATHER = {
    "paris": {"city": "Paris", "temp_c": 21, "sky": "sunny"},
    "oslo": {"city": "Oslo", "temp_c": 4, "sky": "rain"},
    "tokyo": {"city": "Tokyo", "temp_c": 17, "sky": "cloudy"},
}

ORDERS = {
    "ada": [
        {"id": "A-1001", "item": "keyboard", "total": 89.0, "status": "shipped"},
        {"id": "A-1002", "item": "monitor", "total": 249.5, "status": "processing"},
    ],
    "grace": [{"id": "G-2001", "item": "compiler", "total": 1200.0, "status": "delivered"}],
}


def get_weather(city):
    if city.lower() not in WEATHER:
        raise ValueError(f"no weather for {city!r}; known cities: Paris, Oslo, Tokyo")
    return WEATHER[city.lower()]


def list_orders(customer, status=None):
    if customer.lower() not in ORDERS:
        raise ValueError(f"no customer {customer!r}")
    return [o for o in ORDERS[customer.lower()] if status in (None, o["status"])]


TOOLS = {"get_weather": get_weather, "list_orders": list_orders}


def call(name, args):
    """Runs host tool `name`; raises for an unknown tool or bad arguments (the model sees why)."""
    if name not in TOOLS:
        raise ValueError(f"this runtime has no tool {name!r}")
    return TOOLS[name](**args)
