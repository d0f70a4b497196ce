pytest_plugins = ["glbd.lab.pytest_plugin"]
