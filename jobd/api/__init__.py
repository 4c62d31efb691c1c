"""Resource models and their YAML/JSON form."""
