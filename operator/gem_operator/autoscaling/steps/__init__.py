"""The steps of one autoscaler sync, each a small pure function (`pipeline.decide` runs them in order).

observe (`observe.py`) -> signals (`measure.py`: SM reading, SLO feedback, ramp lead, panic window)
-> recommendation (`recommend.py`: precompute queue, idle, yield, hold) -> stabilisation
(`stabilise.py`) -> panic and rate limits (`limits.py`) -> caps and bounds (`limits.py`) ->
decision (`pipeline.py`). Each takes what the steps before it produced and returns a frozen value;
none reads a clock or does I/O (time is passed in).
"""
