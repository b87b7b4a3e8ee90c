-- The database's clock, for the worker's estimate of how far its own clock is off: claims hand out send slots in the
-- database's time, and a worker on another machine must send at those moments by its own clock.
-- Safe to repeat: a read.
SELECT extract(epoch FROM clock_timestamp())::double precision AS now
