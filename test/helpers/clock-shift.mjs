// Preloaded with `--import` into a child process: moves its clock by
// INTERLINK_TEST_CLOCK_OFFSET_MS (a machine whose clock is wrong, or a receiver back after
// days offline). Date.now and argument-less `new Date()` both move.
const offset = Number(process.env.INTERLINK_TEST_CLOCK_OFFSET_MS ?? '0');
if (Number.isFinite(offset) && offset !== 0) {
  const RealDate = Date;
  const realNow = RealDate.now.bind(RealDate);
  class ShiftedDate extends RealDate {
    constructor(...args) {
      if (args.length === 0) super(realNow() + offset);
      else super(...args);
    }
    static now() {
      return realNow() + offset;
    }
  }
  globalThis.Date = ShiftedDate;
}
