"""What this host can emulate, found by trying it (throwaway namespaces; nothing is left).

- :mod:`.kernel`: the qdisc/IFB probe guarding a lab's bring-up
- :mod:`.capabilities`: everything ``aitb doctor`` reports; :mod:`.probe_result`: one probe's
  result; :mod:`.crypto`: in-kernel encryption on offer
"""
