-- The portfolio a WhatsApp Business Account (a webhook's entry[].id) belongs to; no row: none known.
SELECT b.portfolio_id FROM wa_outbox.business_accounts b
WHERE b.waba_id = %(waba_id)s AND b.portfolio_id IS NOT NULL
