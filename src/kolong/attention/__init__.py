"""kolong's attention engine: masks, block masks, the kernels (SDPA, FlexAttention, the chunked exact path,
key bands, SDPA over packed documents' spans, the three regions of a clipped bias) and the choice among them.

It sits below `kolong.positions` and `kolong.models`: a position scheme declares what it hands to attention, the
encoder asks for a plan and runs it, and nothing here imports either of them.
"""
