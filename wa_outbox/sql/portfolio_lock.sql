-- The first statement of setting a portfolio's messaging limit (portfolios.py set_limit): its row, made if it is
-- not there yet, and locked to the commit (the upsert's row lock), so that set_portfolio_limit.sql, the next
-- statement, counts the units with a snapshot that has every claim's units of this portfolio (a claim counts under
-- this same lock). Returns the limit before (NULL: none) and whether a business account belongs to the portfolio.
INSERT INTO wa_outbox.portfolios AS po (portfolio_id) VALUES (%(portfolio_id)s)
ON CONFLICT (portfolio_id) DO UPDATE SET portfolio_id = po.portfolio_id
RETURNING po.messaging_limit AS previous_limit,
          EXISTS (SELECT 1 FROM wa_outbox.business_accounts b WHERE b.portfolio_id = %(portfolio_id)s) AS known
