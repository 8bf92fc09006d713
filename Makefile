# Floodgate developer targets. `make test` is what CI runs (.ci/run).
GO       ?= go
FUZZTIME ?= 20s

.PHONY: run test bench bench-peers fuzz lint build

run:
	$(GO) run ./cmd/floodgate serve

# Installs redis/memcached if missing, starts private servers on 127.0.0.1, vet + race tests.
test:
	bash scripts/test.sh

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# The bench/ module compares peers; its Redis benchmarks need the test servers.
bench-peers:
	@test -d bench || { echo "bench-peers: no bench/ directory"; exit 1; }
	bash scripts/with-servers.sh bash -c "cd bench && $(GO) test -run '^\$$' -bench . -benchmem ./..."

# Runs every Fuzz* target of every package for FUZZTIME each.
fuzz:
	bash scripts/fuzz.sh

lint:
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt -l reports:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

build:
	$(GO) build -o bin/floodgate ./cmd/floodgate
