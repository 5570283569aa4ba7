"""The one configuration model: a TOML file and ``BRIDGE_<SECTION>_<KEY>`` variables,
for ``bridge run`` and ``bridge config check`` alike."""
