"""One experiment run: parse and resolve the experiment file, build the lab and the agents'
programs, replay, observe, analyse, and write the run directory (:mod:`.runner`)."""
