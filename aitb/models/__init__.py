"""Pure data shared by every layer: units, shaping, the resolved lab plan, errors. No I/O."""
