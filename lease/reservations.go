package lease

import "context"

// KindReservations ends upload reservations past their expiry
// (docs/RESERVATIONS.md): each is claimed and ended in one statement
// (reserved -> expired, its quota released, its event written), oldest
// expiry first, in batches of at most Batch, within the kind's budget, by
// whichever gateway claims it first (FOR UPDATE SKIP LOCKED). A write still
// in flight under an expired reservation cannot publish: its commit refuses
// it.
const KindReservations = "reservations"

// ReservationSweeper is the database side of KindReservations (meta's
// Catalog). A driver without it runs the kind as a no-op.
type ReservationSweeper interface {
	// ExpireReservations ends at most limit expired reservations and
	// reports how many it ended.
	ExpireReservations(ctx context.Context, limit int) (int, error)
}

func (s *Service) reservationsBatch(ctx context.Context) (Counts, bool, error) {
	sw, ok := s.db.(ReservationSweeper)
	if !ok {
		return Counts{}, false, nil
	}
	dctx, cancel := s.m.dbctx(ctx)
	defer cancel()
	n, err := sw.ExpireReservations(dctx, s.cfg.Batch)
	if err != nil {
		return Counts{Failed: 1}, false, err
	}
	return Counts{Claimed: n, Completed: n}, n == s.cfg.Batch, nil
}
