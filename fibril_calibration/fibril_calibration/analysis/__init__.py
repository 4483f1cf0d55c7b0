"""What a solution means: local identifiability and covariance (``identifiability``), profile
likelihood intervals (``profile_likelihood``), residual summaries (``summaries``) and the fit
verdict (``verdict``).

Above ``solve`` (a profile re-optimizes), below the outcome, result and engine.
"""
