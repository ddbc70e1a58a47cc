"""Tools around the agent: what runs on a laptop, in a demo or in tests rather than on
the switch (the simulated fabric's runner, ``swtel demo``, the tunnel server)."""
