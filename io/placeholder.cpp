// Placeholder so the io library exists before its first component lands.
namespace calserve::io_placeholder { int anchor = 0; }
