"""The base layer: leaf pieces every other layer needs, importing nothing of awp's."""
