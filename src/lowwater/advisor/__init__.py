"""Tools that choose the lateness bound from the data: the what-if replay and the delay profile."""
