pytest_plugins = ["glbdlab.pytest_plugin"]
