package store

import _ "github.com/jackc/pgx/v5/stdlib"
