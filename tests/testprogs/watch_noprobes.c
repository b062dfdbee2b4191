/* An ELF without any USDT probe. */
int main(void) { return 0; }
