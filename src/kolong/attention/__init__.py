"""kolong's attention engine: masks, block masks, the kernels (SDPA, FlexAttention, the chunked exact path,
key bands, FlashAttention's variable-length kernel) and the choice among them.

It sits below `kolong.positions` and `kolong.models`: a position scheme declares what it hands to attention, the
encoder asks for a plan and runs it, and nothing here imports either of them.
"""
