-- Undo version 6, in reverse order of its sections.

-- == Attempt limits ===================================================================================================
-- Nothing to undo: version 5 reads a NULL max_attempts as WA_OUTBOX_MAX_ATTEMPTS, which is what these rows were
-- meant to have, and which rows held version 1's 10 is no longer known.

-- == /ops sessions ====================================================================================================
-- Version 5's /ops keeps its sessions in the signed cookie alone: every session is ended by this (log in again).
DROP TABLE wa_outbox.ops_sessions;
