//! The tables of a shared database and their versions: `mailjar_schema`
//! holds the version; migrations run in one transaction under an advisory
//! lock, so nodes that start together migrate once.

use std::time::Instant;

use crate::storage::StorageError;

/// The advisory lock every write transaction takes first: commits are
/// serialised, so id order is commit order (see `order.rs`).
pub(super) const ORDER_LOCK: i64 = 0x6d61_696c_6a61_7201;

/// The advisory lock migrations take.
const SCHEMA_LOCK: i64 = 0x6d61_696c_6a61_7202;

/// Each migration, from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    "CREATE TABLE mailjar_messages (
        id bytea PRIMARY KEY,
        received_ms bigint NOT NULL,
        sender text NOT NULL,
        recipients text NOT NULL,
        smtp text NOT NULL,
        raw bytea NOT NULL,
        transcript bytea,
        node text NOT NULL
    );
    -- The greatest id ever committed (it stays when that message is deleted),
    -- its receive time, and the change-log entries pruned so far.
    CREATE TABLE mailjar_head (
        one boolean PRIMARY KEY DEFAULT true CHECK (one),
        id bytea,
        received_ms bigint NOT NULL DEFAULT 0,
        pruned_seq bigint NOT NULL DEFAULT 0
    );
    INSERT INTO mailjar_head DEFAULT VALUES;
    -- What rows cannot say: the messages a node removed (ids first to last).
    CREATE TABLE mailjar_changes (
        seq bigserial PRIMARY KEY,
        first_id bytea NOT NULL,
        last_id bytea NOT NULL,
        node text NOT NULL,
        at timestamptz NOT NULL DEFAULT now()
    );
    CREATE TABLE mailjar_inboxes (
        position integer PRIMARY KEY,
        name text NOT NULL UNIQUE,
        addresses text NOT NULL,
        limits text NOT NULL,
        token bytea NOT NULL,
        smtp_password bytea NOT NULL
    );",
    // Each message's mailbox UID, given under the order lock like its id
    // (the rows there numbered from 1 in id order); the greatest UID ever
    // given, kept in the head; the service's UIDVALIDITY, set once here.
    "ALTER TABLE mailjar_messages ADD COLUMN uid bigint;
    UPDATE mailjar_messages m SET uid = numbered.n
        FROM (SELECT id, row_number() OVER (ORDER BY id) AS n FROM mailjar_messages) numbered
        WHERE m.id = numbered.id;
    ALTER TABLE mailjar_messages ALTER COLUMN uid SET NOT NULL;
    ALTER TABLE mailjar_head ADD COLUMN uid bigint NOT NULL DEFAULT 0,
        ADD COLUMN uid_validity bigint NOT NULL
            DEFAULT (1 + floor(random() * 4294967294))::bigint;
    UPDATE mailjar_head SET uid = (SELECT coalesce(max(uid), 0) FROM mailjar_messages);",
    // Inboxes and fault rules shared live: every change moves config_seq.
    "ALTER TABLE mailjar_head ADD COLUMN config_seq bigint NOT NULL DEFAULT 0;
    CREATE TABLE mailjar_faults (
        position bigserial,
        id text PRIMARY KEY,
        rule text NOT NULL
    );",
    // The seen flag every reader shares; seen_seq is the config_seq of the
    // change that last set it (other nodes read the rows stamped since they last read).
    "ALTER TABLE mailjar_messages ADD COLUMN seen boolean NOT NULL DEFAULT false,
        ADD COLUMN seen_seq bigint NOT NULL DEFAULT 0;
    CREATE INDEX mailjar_messages_seen_seq ON mailjar_messages (seen_seq) WHERE seen_seq > 0;",
    // A write transaction (a batch of messages, removals) as one statement
    // that takes the order lock itself, so the lock is held for the server's
    // work alone and never across a round trip to the node (see `write.rs`). mailjar_after is
    // `order::after` (the next id of a UUIDv7's 122-bit sequence); a test
    // checks the two agree. The lock's key is `ORDER_LOCK`.
    "CREATE OR REPLACE FUNCTION mailjar_after(id bytea) RETURNS bytea
    LANGUAGE plpgsql IMMUTABLE STRICT AS $$
    DECLARE
        hi bigint := ('x' || encode(substring(id FROM 1 FOR 8), 'hex'))::bit(64)::bigint;
        lo bigint := ('x' || encode(substring(id FROM 9 FOR 8), 'hex'))::bit(64)::bigint;
        rand_b_max constant bigint := 4611686018427387903;
    BEGIN
        IF (lo & rand_b_max) < rand_b_max THEN
            lo := lo + 1;
        ELSE
            lo := lo & ~rand_b_max;
            IF (hi & 4095) < 4095 THEN
                hi := hi + 1;
            ELSE
                hi := (((hi >> 16) + 1) << 16) | 28672;
            END IF;
        END IF;
        RETURN decode(lpad(to_hex(hi), 16, '0') || lpad(to_hex(lo), 16, '0'), 'hex');
    END $$;
    CREATE OR REPLACE FUNCTION mailjar_write(p_ids bytea[], p_received bigint[], p_senders text[],
        p_recipients text[], p_smtp text[], p_raw bytea[], p_transcripts bytea[],
        p_node text, p_exact boolean, p_first_ids bytea[], p_last_ids bytea[])
    RETURNS TABLE (o_head bytea, o_config_seq bigint, o_ids bytea[], o_received_floor bigint,
        o_uid_floor bigint)
    LANGUAGE plpgsql AS $$
    DECLARE
        h record;
        previous bytea;
        assigned bytea[] := '{}';
        n integer := coalesce(array_length(p_ids, 1), 0);
    BEGIN
        PERFORM pg_advisory_xact_lock(7881696737237234177);
        SELECT id, received_ms, uid, config_seq INTO h FROM mailjar_head;
        previous := h.id;
        FOR i IN 1 .. n LOOP
            IF previous IS NOT NULL AND p_ids[i] <= previous THEN
                IF p_exact THEN
                    RAISE EXCEPTION 'these messages would not sort after the head';
                END IF;
                previous := mailjar_after(previous);
            ELSE
                previous := p_ids[i];
            END IF;
            assigned := assigned || previous;
        END LOOP;
        INSERT INTO mailjar_messages
            (id, received_ms, sender, recipients, smtp, raw, transcript, uid, node)
        SELECT b.id, CASE WHEN p_exact THEN b.received ELSE greatest(b.received, h.received_ms) END,
            b.sender, b.recipients, b.smtp,
            b.raw, b.transcript, h.uid + b.n, p_node
        FROM unnest(assigned, p_received, p_senders, p_recipients, p_smtp, p_raw, p_transcripts)
            WITH ORDINALITY AS b(id, received, sender, recipients, smtp, raw, transcript, n);
        IF n > 0 THEN
            UPDATE mailjar_head SET id = previous,
                received_ms = greatest(p_received[n], h.received_ms), uid = h.uid + n;
        END IF;
        -- Deletes are idempotent: only what this one deleted is logged, each
        -- range as the first and last id it removed.
        WITH r AS (SELECT * FROM unnest(p_first_ids, p_last_ids) AS r(first_id, last_id)),
        gone AS (DELETE FROM mailjar_messages m USING r
            WHERE m.id BETWEEN r.first_id AND r.last_id RETURNING m.id, r.first_id)
        INSERT INTO mailjar_changes (first_id, last_id, node)
        SELECT (array_agg(gone.id ORDER BY gone.id))[1],
            (array_agg(gone.id ORDER BY gone.id DESC))[1], p_node
        FROM gone GROUP BY gone.first_id ORDER BY gone.first_id;
        -- Messages alone: the others may skip a catch-up once they hold the last id.
        PERFORM pg_notify('mailjar', CASE
            WHEN n > 0 AND coalesce(array_length(p_first_ids, 1), 0) = 0
            THEN p_node || ':' || encode(previous, 'hex') ELSE p_node END);
        RETURN QUERY SELECT h.id, h.config_seq, assigned, h.received_ms, h.uid;
    END $$;
    -- Messages compressed with lz4 rather than pglz: a third less of the
    -- server's time for an insert, and faster reads. Only where the server
    -- has it (PostgreSQL 14 or newer, built with lz4); elsewhere pglz stays.
    DO $$ BEGIN
        EXECUTE 'ALTER TABLE mailjar_messages ALTER COLUMN raw SET COMPRESSION lz4, '
            'ALTER COLUMN transcript SET COMPRESSION lz4';
    EXCEPTION WHEN OTHERS THEN NULL;
    END $$;",
];

/// The schema this build writes.
pub(super) const SCHEMA_VERSION: i32 = MIGRATIONS.len() as i32;

/// Brings the database to [`SCHEMA_VERSION`], or refuses one a newer mailjar wrote.
pub(super) fn migrate(client: &mut postgres::Client, url: &str) -> Result<(), StorageError> {
    let failed = |e: postgres::Error| StorageError(format!("{url}: migrating the schema: {e}"));
    let mut tx = client.transaction().map_err(failed)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
        .map_err(failed)?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS mailjar_schema (version integer NOT NULL)")
        .map_err(failed)?;
    let version: Option<i32> = tx
        .query_opt("SELECT version FROM mailjar_schema", &[])
        .map_err(failed)?
        .map(|r| r.get(0));
    let version = match version {
        Some(v) => v,
        None => {
            tx.execute("INSERT INTO mailjar_schema VALUES (0)", &[])
                .map_err(failed)?;
            0
        }
    };
    if version > SCHEMA_VERSION {
        return Err(StorageError(format!(
            "refusing to start: the database {url} has schema {version}, written by a newer mailjar; this one knows up to schema {SCHEMA_VERSION} (upgrade this node)"
        )));
    }
    for (from, migration) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        let to = from as i32 + 1;
        tracing::info!("{url}: migrating schema {from} to {to}");
        let started = Instant::now();
        tx.batch_execute(migration).map_err(failed)?;
        tx.execute("UPDATE mailjar_schema SET version = $1", &[&to])
            .map_err(failed)?;
        tracing::info!(
            "{url}: now at schema {to} ({} ms)",
            started.elapsed().as_millis()
        );
    }
    tx.commit().map_err(failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_write_function_takes_the_order_lock() {
        let write = MIGRATIONS[4];
        assert!(write.contains(&format!("pg_advisory_xact_lock({ORDER_LOCK})")));
    }
}
