"""What a run's data may do: :mod:`.tls_cert` and :mod:`.tls_pairs` (``transport: {encryption:
tls}``: the run's certificate and which connections are encrypted) and :mod:`.locality_check`
(a placement that would move marked data outside its allowed regions is refused).
"""
